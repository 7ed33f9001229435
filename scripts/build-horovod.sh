#!/usr/bin/env bash
# Installs Horovod 0.28.1 with PyTorch and Gloo support into the project's virtualenv.
#
# PyPI has no Horovod wheel for this Python and torch, and the sdist asks for C++14, which
# torch 2.x headers no longer compile under; so the sdist is patched to C++17 and built here,
# once. The wheel is kept in the wheel cache, so a later run (or a fresh virtualenv) installs it
# in seconds instead of rebuilding.
#
# Usage: scripts/build-horovod.sh          (VENV=path picks another virtualenv than .venv)
set -euo pipefail

HOROVOD_VERSION=0.28.1

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="${VENV:-.venv}"
py="$venv/bin/python"
pip=("$py" -m pip)
constraints="$root/constraints.txt"
cache="${DET_HUB_WHEEL_CACHE:-$HOME/.cache/det_hub/wheels}"

say() { echo "build-horovod: $*"; }
die() { echo "build-horovod: error: $*" >&2; exit 1; }

[ -x "$py" ] || die "no virtualenv at $venv; run \`make install\` first"

horovod_works() { "$py" -c "import horovod.torch" >/dev/null 2>&1; }

if horovod_works; then
  say "Horovod is installed ($("$py" -c 'import horovod; print(horovod.__version__)'))"
  exit 0
fi

# Only a wheel built for this interpreter can load; the tag keeps a cache shared between
# Python versions from handing over the wrong one.
py_tag="$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"

# Installs the wheel's runtime requirements (Requires-Dist, less the extras), pinned by the
# project's constraints so that torch is never replaced.
install_requirements() {
  local wheel="$1" reqs
  reqs="$("$py" - "$wheel" <<'EOF'
import sys
import zipfile
from email.parser import Parser

with zipfile.ZipFile(sys.argv[1]) as whl:
    name = next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
    meta = Parser().parsestr(whl.read(name).decode())
for req in meta.get_all("Requires-Dist") or []:
    if "extra ==" not in req:
        print(req)
EOF
)"
  if [ -n "$reqs" ]; then
    say "installing Horovod's requirements: ${reqs//$'\n'/ }"
    mapfile -t reqs_list <<<"$reqs"
    "${pip[@]}" install -q -c "$constraints" "${reqs_list[@]}"
  fi
}

install_wheel() {
  local wheel="$1"
  say "installing $(basename "$wheel")"
  "${pip[@]}" install -q --no-deps --force-reinstall "$wheel"
  install_requirements "$wheel"
}

# Fast path: a wheel built earlier. It is linked against the torch it was built with, so it is
# only kept if it imports; a wheel left from another torch is dropped and rebuilt.
shopt -s nullglob
cached=("$cache/horovod-$HOROVOD_VERSION-$py_tag-"*.whl)
shopt -u nullglob
if [ "${#cached[@]}" -gt 0 ]; then
  install_wheel "${cached[0]}"
  if horovod_works; then
    say "done (from the wheel cache)"
    exit 0
  fi
  say "the cached wheel does not load with this torch; removing it and building again"
  "${pip[@]}" uninstall -q -y horovod
  rm -f "${cached[0]}"
fi

# Build tools. Debian names; on a fresh Debian 12 cmake, make and g++ are missing, and the
# Python headers are missing unless the virtualenv's Python comes with its own.
missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v make >/dev/null || missing+=(make)
command -v g++ >/dev/null || missing+=(g++)
"$py" -c 'import os, sysconfig, sys
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  || missing+=(python3-dev)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    die "building Horovod needs these Debian packages: ${missing[*]} (apt-get install them as root)"
  fi
  say "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/horovod-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT

say "downloading the Horovod $HOROVOD_VERSION sources"
"${pip[@]}" download -q --no-deps --no-binary :all: "horovod==$HOROVOD_VERSION" -d "$work"
tar -xzf "$work/horovod-$HOROVOD_VERSION.tar.gz" -C "$work"
src="$work/horovod-$HOROVOD_VERSION"

# torch 2.x headers need C++17. Patch exactly the line we expect, and stop if it is not
# there: an unpatched build fails only minutes later, with an error far from the cause.
for cmakelists in CMakeLists.txt horovod/torch/CMakeLists.txt; do
  file="$src/$cmakelists"
  grep -Eq '^[[:space:]]*set\(CMAKE_CXX_STANDARD 14\)' "$file" \
    || die "$cmakelists has no 'set(CMAKE_CXX_STANDARD 14)' to patch; the sources changed"
  sed -Ei 's/^([[:space:]]*)set\(CMAKE_CXX_STANDARD 14\)/\1set(CMAKE_CXX_STANDARD 17)/' "$file"
  if grep -Eq 'set\(CMAKE_CXX_STANDARD 14\)' "$file" \
    || ! grep -Eq 'set\(CMAKE_CXX_STANDARD 17\)' "$file"; then
    die "patching $cmakelists to C++17 failed"
  fi
done

# The build runs without isolation so that it compiles against the torch installed here. So
# what setup.py asks for at build time (setup_requires) must be installed first, and
# setuptools must be able to make wheels (older ones need the separate wheel package).
build_reqs=(cloudpickle psutil pyyaml packaging cffi setuptools)
"$py" -c "import setuptools.command.bdist_wheel" 2>/dev/null || build_reqs+=(wheel)
say "installing build requirements: ${build_reqs[*]}"
"${pip[@]}" install -q -c "$constraints" "${build_reqs[@]}"

say "building Horovod $HOROVOD_VERSION (about 4 minutes)..."
log="$work/build.log"
start=$SECONDS
# Only CMake's progress lines are shown; the full output goes to the log, shown on failure.
if ! HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
  HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS="${MAKEFLAGS:--j2}" \
  "${pip[@]}" wheel -v --no-build-isolation --no-deps -w "$work/dist" "$src" 2>&1 \
  | tee "$log" | { grep --line-buffered -E '^ *\[ *[0-9]+%\]' | sed -u 's/^ */  /' || true; }
then
  tail -n 60 "$log" >&2
  trap - EXIT
  die "building Horovod failed; the full log and build tree are kept in $work"
fi
wheels=("$work/dist/horovod-$HOROVOD_VERSION-"*.whl)
[ -f "${wheels[0]}" ] || die "the build made no wheel; see $log"
say "built $(basename "${wheels[0]}") in $((SECONDS - start)) s"

# Copied under a name the cache's glob does not match, then renamed, so that no one installs
# a half-written wheel.
mkdir -p "$cache"
cp "${wheels[0]}" "$cache/.$(basename "${wheels[0]}").partial"
mv "$cache/.$(basename "${wheels[0]}").partial" "$cache/$(basename "${wheels[0]}")"
say "kept in $cache"

install_wheel "$cache/$(basename "${wheels[0]}")"
horovod_works || die "Horovod was installed but \`import horovod.torch\` fails"
say "done"

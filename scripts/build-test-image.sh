#!/usr/bin/env bash
# Builds the base image the Docker agent's tests run their containers from, without a registry:
# a minimal Debian bookworm root file system made by debootstrap from the Debian mirror, then
# `docker import`ed into the engine at DOCKER_HOST.
#
#   scripts/build-test-image.sh DOCKER_HOST TAG
#
# The image holds no det_hub and no torch: tests bind-mount the repository and its .venv
# read-only at the same paths (and the venv's base Python where that lives outside /usr), so a
# container's `python` is the project's own. What the image brings is what that Python and
# torch link against: the Debian python3 (with libssl3, libffi8, libsqlite3-0 and friends),
# libstdc++6 and libgomp1.
#
# Nothing is done when TAG already exists on that engine. The root file system is kept as a
# tarball under .test-services/ (override with DET_HUB_TEST_IMAGE_CACHE), so a second engine
# imports it without a second debootstrap. Needs root (debootstrap does) and the debootstrap
# package (`make system-deps`).
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 DOCKER_HOST TAG" >&2
  exit 2
fi
host=$1
tag=$2
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${DET_HUB_TEST_IMAGE_CACHE:-$root/.test-services/images}
mirror=${DET_HUB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=bookworm
packages=python3,libgomp1,libstdc++6,ca-certificates
# The layout's version is part of the key: a change to how the root file system is made below
# makes a new tarball rather than reusing an old one.
layout=2
tarball="$cache/rootfs-$suite-$(echo "$packages $layout" | cksum | cut -d' ' -f1).tar"

log() { echo "build-test-image: $*" >&2; }

if DOCKER_HOST=$host docker image inspect "$tag" >/dev/null 2>&1; then
  log "$tag exists on $host"
  exit 0
fi

if [ ! -s "$tarball" ]; then
  command -v debootstrap >/dev/null || { log "debootstrap is not installed (make system-deps)"; exit 1; }
  mkdir -p "$cache"
  work=$(mktemp -d "$cache/rootfs.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  log "debootstrap $suite ($packages) into $work"
  start=$(date +%s)
  debootstrap --variant=minbase --include="$packages" "$suite" "$work/fs" "$mirror" \
    >"$work/debootstrap.log" 2>&1 ||
    { log "debootstrap failed:"; tail -20 "$work/debootstrap.log" >&2; exit 1; }
  # Package caches and lists are of no use in a test image and only make it bigger.
  rm -rf "$work/fs/var/cache/apt/archives/"*.deb "$work/fs/var/lib/apt/lists/"*
  # Tasks run as unprivileged users; the project's Python may be bind-mounted below /root
  # (a pyenv build), which they must be able to reach.
  chmod 0755 "$work/fs/root"
  tar -C "$work/fs" --numeric-owner -cf "$work/rootfs.tar" .
  mv "$work/rootfs.tar" "$tarball"
  log "root file system made in $(( $(date +%s) - start )) s: $tarball"
fi

log "importing $tarball as $tag into $host"
DOCKER_HOST=$host docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' \
  - "$tag" <"$tarball" >/dev/null
log "$tag imported"

#!/usr/bin/env bash
# Starts the real services the test suite talks to: a PostgreSQL cluster and two Docker engines
# (two agent hosts, each with its own socket, data root, exec root and pid file) holding the
# offline-built test image (scripts/build-test-image.sh), all private to this checkout (under
# .test-services/), listening on loopback or a unix socket only. A service already running is
# reused. Prints the environment the tests read, as `export` lines:
#   scripts/test-services.sh start > .test-services.env && . .test-services.env
#   scripts/test-services.sh stop
# Exits non-zero, with the reason on stderr, when a service cannot be started.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
state="$root/.test-services"
pg_port=${DET_HUB_TEST_PG_PORT:-}
pg_data="$state/pg"
docker_root="$state/docker"
docker2_root="$state/docker2"
test_image=${DET_HUB_TEST_IMAGE:-det-hub-test:bookworm-2}

log() { echo "test-services: $*" >&2; }

pg_bin() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/pg_ctl" ] && { echo "$d"; return; }
  done
  command -v pg_ctl >/dev/null && dirname "$(command -v pg_ctl)" && return
  return 1
}

as_pg() {
  # initdb and postgres refuse to run as root.
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

port_free() {
  ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

start_pg() {
  local bin; bin=$(pg_bin) || { log "PostgreSQL is not installed"; return 1; }
  mkdir -p "$state"
  # A running cluster of this checkout keeps its port; a new one takes the first free port
  # from 54329 up, so that two checkouts on one machine do not collide.
  if [ -z "$pg_port" ] && as_pg "$bin/pg_ctl" -D "$pg_data" status >/dev/null 2>&1; then
    pg_port=$(sed -n 4p "$pg_data/postmaster.pid")  # the line PostgreSQL keeps its port on
  fi
  if [ -z "$pg_port" ]; then
    pg_port=54329
    while ! port_free "$pg_port"; do pg_port=$((pg_port + 1)); done
  fi
  if [ ! -f "$pg_data/PG_VERSION" ]; then
    mkdir -p "$pg_data"
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$pg_data"
    as_pg "$bin/initdb" -D "$pg_data" -U dethub --auth=trust >/dev/null
  fi
  if ! as_pg "$bin/pg_ctl" -D "$pg_data" status >/dev/null 2>&1; then
    as_pg "$bin/pg_ctl" -D "$pg_data" -l "$pg_data/server.log" -w \
      -o "-c listen_addresses=127.0.0.1 -p $pg_port -k $pg_data -c fsync=off -c max_connections=200" start >/dev/null ||
      { log "PostgreSQL did not start:"; tail -5 "$pg_data/server.log" >&2; return 1; }
  fi
  as_pg "$bin/psql" -h 127.0.0.1 -p "$pg_port" -U dethub -d postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname='dethub_test'" | grep -q 1 ||
    as_pg "$bin/psql" -h 127.0.0.1 -p "$pg_port" -U dethub -d postgres -qc "CREATE DATABASE dethub_test" >/dev/null
  log "PostgreSQL on 127.0.0.1:$pg_port"
  echo "export DET_HUB_TEST_PG_URL=postgresql+psycopg://dethub@127.0.0.1:$pg_port/dethub_test"
}

# start_engine DIR: a dockerd whose socket, data, exec root, pid file and log all live in DIR.
start_engine() {
  local dir=$1 sock="$1/docker.sock"
  mkdir -p "$dir"
  if ! DOCKER_HOST="unix://$sock" docker info >/dev/null 2>&1; then
    # Host networking only: test containers reach everything on 127.0.0.1.
    setsid dockerd --host "unix://$sock" --data-root "$dir/data" \
      --exec-root "$dir/exec" --pidfile "$dir/dockerd.pid" \
      --bridge=none --iptables=false --ip6tables=false --storage-driver=overlay2 \
      >"$dir/dockerd.log" 2>&1 < /dev/null &
    local i
    for i in $(seq 1 60); do
      DOCKER_HOST="unix://$sock" docker info >/dev/null 2>&1 && break
      sleep 0.5
    done
    DOCKER_HOST="unix://$sock" docker info >/dev/null 2>&1 ||
      { log "dockerd did not start; see $dir/dockerd.log"; tail -20 "$dir/dockerd.log" >&2; return 1; }
  fi
  log "Docker engine on unix://$sock"
}

start_docker() {
  command -v dockerd >/dev/null || { log "dockerd is not installed"; return 1; }
  start_engine "$docker_root"
  echo "export DET_HUB_TEST_DOCKER_HOST=unix://$docker_root/docker.sock"
  start_engine "$docker2_root"
  echo "export DET_HUB_TEST_DOCKER_HOST_2=unix://$docker2_root/docker.sock"
  # The first engine builds the root file system; the second imports the cached tarball.
  "$root/scripts/build-test-image.sh" "unix://$docker_root/docker.sock" "$test_image"
  "$root/scripts/build-test-image.sh" "unix://$docker2_root/docker.sock" "$test_image"
  echo "export DET_HUB_TEST_IMAGE=$test_image"
}

stop_engine() {
  local dir=$1 pid i
  if [ -f "$dir/dockerd.pid" ]; then
    pid=$(cat "$dir/dockerd.pid")
    if kill "$pid" 2>/dev/null; then
      # dockerd removes its pid file on the way out; wait so a following start finds it gone.
      for i in $(seq 1 40); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
      done
    fi
  fi
  unmount_below "$dir"
}

unmount_below() {
  # An engine leaves mounts under its roots (its network namespace, overlays of a killed
  # engine); unmounted, deepest first, so that the directory can be removed.
  local m
  [ -d "$1" ] || return 0
  awk -v root="$(cd "$1" && pwd)/" 'index($2, root) == 1 { print $2 }' /proc/self/mounts |
    sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
}

stop_all() {
  local bin
  if bin=$(pg_bin) && [ -f "$pg_data/PG_VERSION" ]; then
    as_pg "$bin/pg_ctl" -D "$pg_data" -m fast stop >/dev/null 2>&1 || true
  fi
  stop_engine "$docker_root"
  stop_engine "$docker2_root"
}

case "${1:-start}" in
  start) start_pg; start_docker ;;
  stop) stop_all ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac

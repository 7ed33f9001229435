#!/usr/bin/env bash
# Starts the real services the test suite talks to: a PostgreSQL cluster and a Docker engine,
# each private to this checkout (under .test-services/), listening on loopback or a unix socket
# only. Prints the environment the tests read, as `export` lines:
#   scripts/test-services.sh start > .test-services.env && . .test-services.env
#   scripts/test-services.sh stop
# Exits non-zero, with the reason on stderr, when a service cannot be started.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
state="$root/.test-services"
pg_port=${DET_HUB_TEST_PG_PORT:-}
pg_data="$state/pg"
docker_root="$state/docker"

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

start_docker() {
  command -v dockerd >/dev/null || { log "dockerd is not installed"; return 1; }
  local sock="$docker_root/docker.sock"
  mkdir -p "$docker_root"
  if ! DOCKER_HOST="unix://$sock" docker info >/dev/null 2>&1; then
    # Host networking only: test containers reach everything on 127.0.0.1.
    setsid dockerd --host "unix://$sock" --data-root "$docker_root/data" \
      --exec-root "$docker_root/exec" --pidfile "$docker_root/dockerd.pid" \
      --bridge=none --iptables=false --ip6tables=false --storage-driver=overlay2 \
      >"$docker_root/dockerd.log" 2>&1 < /dev/null &
    local i
    for i in $(seq 1 60); do
      DOCKER_HOST="unix://$sock" docker info >/dev/null 2>&1 && break
      sleep 0.5
    done
    DOCKER_HOST="unix://$sock" docker info >/dev/null 2>&1 ||
      { log "dockerd did not start; see $docker_root/dockerd.log"; tail -20 "$docker_root/dockerd.log" >&2; return 1; }
  fi
  log "Docker engine on unix://$sock"
  echo "export DET_HUB_TEST_DOCKER_HOST=unix://$sock"
}

stop_all() {
  local bin
  if bin=$(pg_bin) && [ -f "$pg_data/PG_VERSION" ]; then
    as_pg "$bin/pg_ctl" -D "$pg_data" -m fast stop >/dev/null 2>&1 || true
  fi
  if [ -f "$docker_root/dockerd.pid" ]; then
    kill "$(cat "$docker_root/dockerd.pid")" 2>/dev/null || true
  fi
}

case "${1:-start}" in
  start) start_pg; start_docker ;;
  stop) stop_all ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# Starts the real services the test suite talks to: a PostgreSQL cluster, two Docker engines
# (two agent hosts, each with its own socket, data root, exec root and pid file) holding the
# offline-built test image (scripts/build-test-image.sh), a Slurm cluster (munged, slurmctld
# and two slurmd, each node one CPU) without accounting, and a second one that keeps accounting
# as most sites' do (MariaDB, slurmdbd, slurmctld and one slurmd; associations and QOS
# enforced), all private to this checkout (under .test-services/), listening on loopback or a
# unix socket only. A service already running is reused. Prints the environment the tests
# read, as `export` lines:
#   scripts/test-services.sh start > .test-services.env && . .test-services.env
#   scripts/test-services.sh stop
#   scripts/test-services.sh start slurm   (only the services named: pg, docker, slurm,
#   slurm-acct; stop takes them too)
# Exits non-zero, with the reason on stderr, when a service cannot be started.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
state="$root/.test-services"
pg_port=${DET_HUB_TEST_PG_PORT:-}
pg_data="$state/pg"
docker_root="$state/docker"
docker2_root="$state/docker2"
test_image=${DET_HUB_TEST_IMAGE:-det-hub-test:bookworm-2}
slurm_dir="$state/slurm"
acct_dir="$state/slurm-acct"

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

# ------------------------------------------------------------------------------------ Slurm
# A private Slurm: its own munged (own key and socket), a controller and two node daemons of one
# CPU each (n1, n2: Debian's build runs several on one host, told apart by -N and their ports),
# with config, state, spools and logs under .test-services/slurm. The Slurm commands find it by
# SLURM_CONF; jobs run as the users that submit them, so the directory is readable by all.

slurm_ctl() { SLURM_CONF="$slurm_dir/slurm.conf" "$@"; }

slurm_answers() {
  [ -f "$slurm_dir/slurm.conf" ] && slurm_ctl scontrol ping 2>/dev/null | grep -q "is UP"
}

free_ports() {
  # free_ports N FROM: N free ports of 127.0.0.1, from FROM up.
  local n=$1 port=$2 found=()
  while [ "${#found[@]}" -lt "$n" ]; do
    port_free "$port" && found+=("$port")
    port=$((port + 1))
  done
  echo "${found[@]}"
}

# What both test clusters' slurm.conf say: cluster_conf NAME DIR CTLD_PORT SLURMD_PORT prints
# the head (ClusterName to the job accounting gatherer), scheduling_conf the scheduling.
cluster_conf() {
  cat <<EOF
# Written by scripts/test-services.sh: a private test cluster on 127.0.0.1.
ClusterName=$1
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$3
SlurmdPort=$4
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$slurm_dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$2/state
SlurmdSpoolDir=$2/spool/%n
SlurmctldPidFile=$2/run/slurmctld.pid
SlurmdPidFile=$2/run/slurmd-%n.pid
SlurmctldLogFile=$2/log/slurmctld.log
SlurmdLogFile=$2/log/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
EOF
}

scheduling_conf() {
  cat <<EOF
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
KillWait=5
EOF
}

write_slurm_conf() {
  local host ports
  host=$(hostname -s)
  read -r -a ports <<< "$(free_ports 4 46817)"
  {
    cluster_conf dethubtest "$slurm_dir" "${ports[0]}" "${ports[1]}"
    echo "AccountingStorageType=accounting_storage/none"
    scheduling_conf
    cat <<EOF
MinJobAge=600
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=${ports[2]} CPUs=1 RealMemory=2000 State=UNKNOWN
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=${ports[3]} CPUs=1 RealMemory=2000 State=UNKNOWN
# Jobs of 'urgent' preempt those of 'debug' as a site's preempting partition would: Slurm
# cancels the preempted job, SIGTERM to every process of it, then SIGKILL after KillWait.
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=urgent Nodes=n1,n2 MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF
EOF
  } > "$slurm_dir/slurm.conf"
}

start_munge() {
  local m="$slurm_dir/munge"
  mkdir -p "$m" "$slurm_dir/log"
  chmod 755 "$m"
  [ -f "$m/munge.key" ] || mungekey -c -k "$m/munge.key"
  if [ -f "$m/munged.pid" ] && kill -0 "$(cat "$m/munged.pid")" 2>/dev/null; then
    return 0
  fi
  # --force: munged refuses to run as root without it; this one serves the test cluster only.
  munged --force --socket="$m/munge.socket" --key-file="$m/munge.key" \
    --pid-file="$m/munged.pid" --seed-file="$m/munged.seed" --log-file="$slurm_dir/log/munged.log" ||
    { log "munged did not start; see $slurm_dir/log/munged.log"; return 1; }
}

nodes_up() {
  # nodes_up DIR N: wait (30 s at most) until the cluster of DIR/slurm.conf has N nodes up.
  local i count
  for i in $(seq 1 60); do
    count=$(SLURM_CONF="$1/slurm.conf" sinfo -h -t idle,mix,alloc -o '%D' 2>/dev/null || true)
    [ "$count" = "$2" ] && return 0
    sleep 0.5
  done
  log "the test Slurm's nodes under $1 are not up:"
  SLURM_CONF="$1/slurm.conf" sinfo >&2 || true
  tail -5 "$1/log/slurmctld.log" >&2
  return 1
}

start_slurm() {
  command -v slurmctld >/dev/null && command -v munged >/dev/null ||
    { log "Slurm is not installed (apt-get install slurm-wlm munge)"; return 1; }
  [ "$(id -u)" = 0 ] || { log "the test Slurm runs its daemons as root; run this as root"; return 1; }
  mkdir -p "$slurm_dir"/{state,spool,run,log}
  chmod 755 "$slurm_dir"
  start_munge
  if ! slurm_answers; then
    # Written again where an older version of this script wrote it (no preempting partition).
    grep -qs "^PartitionName=urgent" "$slurm_dir/slurm.conf" || write_slurm_conf
    slurm_ctl slurmctld -i -f "$slurm_dir/slurm.conf" ||
      { log "slurmctld did not start; see $slurm_dir/log/slurmctld.log"; return 1; }
    local node
    for node in n1 n2; do
      slurm_ctl slurmd -f "$slurm_dir/slurm.conf" -N "$node" ||
        { log "slurmd $node did not start; see $slurm_dir/log/slurmd-$node.log"; return 1; }
    done
  fi
  nodes_up "$slurm_dir" 2 || return 1
  slurm_python
  log "Slurm (partition debug, and urgent, which preempts it; nodes n1 n2) with SLURM_CONF=$slurm_dir/slurm.conf"
  echo "export DET_HUB_TEST_SLURM_CONF=$slurm_dir/slurm.conf"
  echo "export DET_HUB_TEST_SLURM_PARTITION=debug"
  echo "export DET_HUB_TEST_SLURM_PYTHON=$slurm_dir/python/bin/python"
}

# The cluster with accounting: its own controller, node (a1, one CPU) and ports, the munged of
# the first, and MariaDB and slurmdbd for its accounting. Root and nobody (whom the tests' jobs
# run as) may submit under account dethub with QOS normal, high, low and one (one running job
# per user); QOS elsewhere exists but is no association's, so a job asking for it is refused.
acct_ctl() { SLURM_CONF="$acct_dir/slurm.conf" "$@"; }

# Whether the accounting controller holds the QOS and associations the tests submit under.
acct_knows() {
  local qos known
  known=$(acct_ctl scontrol show assoc_mgr flags=qos 2>/dev/null) || return 1
  for qos in normal high low elsewhere one; do
    grep -q "^QOS=$qos(" <<<"$known" || return 1
  done
  acct_ctl scontrol show assoc_mgr users=nobody accounts=dethub flags=assoc 2>/dev/null |
    grep -q "UserName=nobody("
}

acct_answers() {
  [ -f "$acct_dir/slurm.conf" ] && acct_ctl scontrol ping 2>/dev/null | grep -q "is UP"
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

write_acct_conf() {
  local host ports
  host=$(hostname -s)
  read -r -a ports <<< "$(free_ports 5 46830)"
  echo "${ports[0]}" > "$acct_dir/mariadb.port"
  cat > "$acct_dir/slurmdbd.conf" <<EOF
# Written by scripts/test-services.sh: the accounting of the second test cluster.
AuthType=auth/munge
AuthInfo=socket=$slurm_dir/munge/munge.socket
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=${ports[1]}
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=${ports[0]}
StorageUser=slurm
StoragePass=dethub
StorageLoc=slurm_acct_db
PidFile=$acct_dir/run/slurmdbd.pid
LogFile=$acct_dir/log/slurmdbd.log
EOF
  chmod 600 "$acct_dir/slurmdbd.conf"
  {
    cluster_conf dethubacct "$acct_dir" "${ports[2]}" "${ports[3]}"
    cat <<EOF
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=${ports[1]}
# The munge socket the controller and the client commands reach slurmdbd through.
AccountingStoragePass=$slurm_dir/munge/munge.socket
AccountingStorageEnforce=associations,limits,qos
EOF
    scheduling_conf
    cat <<EOF
# Ended jobs leave the controller 2 s after their end (sites keep them minutes), so that the
# tests see what only accounting still knows of a job.
MinJobAge=2
NodeName=a1 NodeHostname=$host NodeAddr=127.0.0.1 Port=${ports[4]} CPUs=1 RealMemory=2000 State=UNKNOWN
PartitionName=acct Nodes=a1 Default=YES MaxTime=INFINITE State=UP
EOF
  } > "$acct_dir/slurm.conf"
}

start_mariadb() {
  local db="$acct_dir/mysql" sock="$acct_dir/run/mariadb.sock" i
  alive "$acct_dir/run/mariadb.pid" && return 0
  if [ ! -d "$db/mysql" ]; then
    mariadb-install-db --user=root --datadir="$db" --skip-test-db \
      --auth-root-authentication-method=normal >"$acct_dir/log/mariadb-install.log" 2>&1 ||
      { log "MariaDB's data directory could not be made; see $acct_dir/log/mariadb-install.log"
        return 1; }
  fi
  setsid -f mariadbd --user=root --datadir="$db" --socket="$sock" --bind-address=127.0.0.1 \
    --port="$(cat "$acct_dir/mariadb.port")" --pid-file="$acct_dir/run/mariadb.pid" \
    --log-error="$acct_dir/log/mariadb.log" --skip-name-resolve </dev/null >/dev/null 2>&1
  for i in $(seq 1 100); do
    mariadb --socket="$sock" -uroot -e "SELECT 1" >/dev/null 2>&1 && break
    sleep 0.1
  done
  mariadb --socket="$sock" -uroot -e "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1'
    IDENTIFIED BY 'dethub'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" ||
    { log "MariaDB did not start; see $acct_dir/log/mariadb.log"; return 1; }
}

start_slurm_acct() {
  command -v slurmdbd >/dev/null && command -v mariadbd >/dev/null ||
    { log "Slurm's accounting is not installed (apt-get install slurmdbd mariadb-server)"
      return 1; }
  start_slurm >/dev/null  # its munged
  mkdir -p "$acct_dir"/{state,spool,run,log}
  chmod 755 "$acct_dir"
  [ -f "$acct_dir/slurm.conf" ] || write_acct_conf
  start_mariadb
  if ! alive "$acct_dir/run/slurmdbd.pid"; then
    # slurmdbd reads the slurmdbd.conf beside the slurm.conf SLURM_CONF names.
    acct_ctl slurmdbd || { log "slurmdbd did not start; see $acct_dir/log/slurmdbd.log"; return 1; }
  fi
  local i qos
  for i in $(seq 1 60); do
    acct_ctl sacctmgr -n list cluster >/dev/null 2>&1 && break
    sleep 0.25
  done
  acct_ctl sacctmgr -n list cluster format=cluster -p 2>/dev/null | grep -q "^dethubacct|" ||
    acct_ctl sacctmgr -i add cluster dethubacct >/dev/null ||
    { log "slurmdbd does not answer; see $acct_dir/log/slurmdbd.log"; return 1; }
  # What the tests submit under, added where missing (sacctmgr refuses what exists), before
  # the controller starts: it loads them whole as it registers. Added after, each reaches it
  # as an update slurmdbd pushes, and one pushed while it registers can be lost.
  for qos in high low elsewhere "one MaxJobsPerUser=1"; do
    acct_ctl sacctmgr -n list qos format=name -p | grep -q "^${qos%% *}|" ||
      acct_ctl sacctmgr -i add qos $qos >/dev/null
  done
  acct_ctl sacctmgr -n list account format=account -p | grep -q "^dethub|" ||
    acct_ctl sacctmgr -i add account dethub >/dev/null
  acct_ctl sacctmgr -n list assoc format=account,user -p | grep -q "^dethub|nobody|" ||
    acct_ctl sacctmgr -i add user root,nobody account=dethub defaultaccount=dethub \
      qos=normal,high,low,one >/dev/null
  if ! acct_answers; then
    acct_ctl slurmctld -i -f "$acct_dir/slurm.conf" ||
      { log "slurmctld (accounting) did not start; see $acct_dir/log/slurmctld.log"; return 1; }
    acct_ctl slurmd -f "$acct_dir/slurm.conf" -N a1 ||
      { log "slurmd a1 did not start; see $acct_dir/log/slurmd-a1.log"; return 1; }
  fi
  # The controller's own view must hold every QOS and nobody's association before a test
  # submits under them.
  for i in $(seq 1 80); do
    acct_knows && break
    sleep 0.25
  done
  acct_knows || { log "the accounting controller does not know the tests' QOS and" \
    "associations (stop slurm-acct and start it again); see $acct_dir/log/slurmctld.log"
    return 1; }
  nodes_up "$acct_dir" 1 || return 1
  log "Slurm with accounting (partition acct, node a1; QOS enforced) with SLURM_CONF=$acct_dir/slurm.conf"
  echo "export DET_HUB_TEST_SLURM_ACCT_CONF=$acct_dir/slurm.conf"
  echo "export DET_HUB_TEST_SLURM_ACCT_PARTITION=acct"
}

stop_slurm_acct() {
  local f
  if acct_answers; then
    acct_ctl scancel --full --signal=KILL --state=running 2>/dev/null || true
    acct_ctl scancel --state=pending 2>/dev/null || true
    acct_ctl scontrol shutdown >/dev/null 2>&1 || true
  fi
  for f in "$acct_dir"/run/slurmctld.pid "$acct_dir"/run/slurmd-*.pid \
      "$acct_dir/run/slurmdbd.pid" "$acct_dir/run/mariadb.pid"; do
    stop_pid_file "$f"
  done
}

stop_pid_file() {
  local pid i
  [ -f "$1" ] || return 0
  pid=$(cat "$1")
  kill "$pid" 2>/dev/null || true
  for i in $(seq 1 40); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.25
  done
  rm -f "$1"
}

slurm_python() {
  # Jobs run as their users, straight on the node: they need a Python every account can run.
  # The checkout's environment may be built on a Python in root's home (pyenv); this one is
  # Debian's, with the checkout's environment's packages added by a .pth file.
  local venv="$slurm_dir/python" site
  [ -x "$venv/bin/python" ] && return 0
  [ -x /usr/bin/python3 ] || { log "Slurm's test Python needs Debian's python3"; return 1; }
  site=$("$root/.venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
  /usr/bin/python3 -m venv --without-pip "$venv"
  echo "import site; site.addsitedir('$site')" > \
    "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/det_hub_checkout.pth"
}

stop_slurm() {
  local f
  stop_slurm_acct  # it uses this cluster's munged
  if slurm_answers; then
    # Jobs first: their processes would outlive the daemons.
    slurm_ctl scancel --full --signal=KILL --state=running 2>/dev/null || true
    slurm_ctl scancel --state=pending 2>/dev/null || true
    slurm_ctl scontrol shutdown >/dev/null 2>&1 || true
  fi
  for f in "$slurm_dir"/run/*.pid "$slurm_dir/munge/munged.pid"; do
    stop_pid_file "$f"
  done
}

stop_pg() {
  local bin
  if bin=$(pg_bin) && [ -f "$pg_data/PG_VERSION" ]; then
    as_pg "$bin/pg_ctl" -D "$pg_data" -m fast stop >/dev/null 2>&1 || true
  fi
}

stop_all() {
  stop_pg
  stop_engine "$docker_root"
  stop_engine "$docker2_root"
  stop_slurm
}

# `start slurm` (or `start pg docker`, ...) starts only the services named; `stop slurm` stops
# only those.
case "${1:-start}" in
  start)
    shift || true
    for service in "${@:-pg docker slurm slurm-acct}"; do
      for s in $service; do
        case "$s" in
          pg) start_pg ;; docker) start_docker ;; slurm) start_slurm ;;
          slurm-acct) start_slurm_acct ;;
          *) echo "unknown service $s (pg, docker, slurm, slurm-acct)" >&2; exit 2 ;;
        esac
      done
    done ;;
  stop)
    shift || true
    if [ $# = 0 ]; then stop_all; fi
    for s in "$@"; do
      case "$s" in
        pg) stop_pg ;; docker) stop_engine "$docker_root"; stop_engine "$docker2_root" ;;
        slurm) stop_slurm ;;
        slurm-acct) stop_slurm_acct ;;
        *) echo "unknown service $s (pg, docker, slurm, slurm-acct)" >&2; exit 2 ;;
      esac
    done ;;
  *) echo "usage: $0 start|stop [pg|docker|slurm|slurm-acct ...]" >&2; exit 2 ;;
esac

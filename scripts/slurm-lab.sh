#!/usr/bin/env bash
# A Slurm test cluster with simulated GPUs (test lab only, as root), beside the simulated GPU lab and labb.
#
#   scripts/slurm-lab.sh [up]   provision / reuse (what `make slurm-lab` runs; idempotent)
#   scripts/slurm-lab.sh status say what runs
#   scripts/slurm-lab.sh down   stop exactly what it started (what `make slurm-lab-down` runs); keeps state
#   scripts/slurm-lab.sh purge  down, then delete its state, run and log folders and its hosts file
#
# Debian's slurm-wlm 22.05, munge, slurmdbd and mariadb-server (installed once with apt; offline after):
#   munged      its own key, socket and pid file (AuthInfo=socket=… in slurm.conf and slurmdbd.conf)
#   mariadbd    its own data folder, 127.0.0.1:$DB_PORT only; the accounting database for slurmdbd
#   slurmdbd    127.0.0.1:$DBD_PORT: `sacct` answers
#   slurmctld   on the veth address $ADDR_MAIN:$CTLD_PORT, so the node in the namespace reaches it
#   slurmd n1   in the main namespace, 4 simulated GPUs; its Docker daemon is a sim-lab-style second
#               dockerd of its own (scripts/sim-lab.sh as an instance under this lab's state)
#   slurmd n2   in network namespace $NS (10.230.0.2), 2 simulated GPUs; its Docker daemon and sshd are a
#               remote-lab host of its own (scripts/remote-lab.sh as an instance), reached over SSH
# GPUs: character devices (mknod c 195 N) named in gres.conf with AutoDetect=off; without real device
# files the node registers 0 GPUs and is drained. The simulated NVIDIA hook on each node's dockerd lets
# compose `driver: nvidia` device requests start. Nothing here is a real GPU.
# The Epilog removes a finished job's leftover containers (label labctl.slurm.job) from the node's Docker.
#
# State roots and names come from variables (defaults below), so a second instance can live beside this one:
#   LABCTL_SLURM_NAME       lcslurm                  cluster name; the namespace is <name>-n2
#   LABCTL_SLURM_STATE      /var/lib/labctl-<name>   configs, keys, spool, state save, database, devices
#   LABCTL_SLURM_RUN        /var/run/labctl-<name>   sockets and pid files
#   LABCTL_SLURM_LOGS       /var/log/labctl-<name>   daemon logs
#   LABCTL_SLURM_PORT_BASE  47700                    ctld +10, slurmd +11, slurmdbd +13, mariadb +14, ssh +22
#   LABCTL_SLURM_ADDR_MAIN  10.230.0.1               veth address in the main namespace (/30)
#   LABCTL_SLURM_ADDR       10.230.0.2               veth address inside the namespace (node n2)
#   LABCTL_SLURM_HOSTS_YAML build/slurm-lab/hosts.yaml in this checkout (the cluster entry labctl reads)
set -Eeuo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
NAME=${LABCTL_SLURM_NAME:-lcslurm}
NS=$NAME-n2
STATE=${LABCTL_SLURM_STATE:-/var/lib/labctl-$NAME}
RUN=${LABCTL_SLURM_RUN:-/var/run/labctl-$NAME}
LOGS=${LABCTL_SLURM_LOGS:-/var/log/labctl-$NAME}
PORT_BASE=${LABCTL_SLURM_PORT_BASE:-47700}
ADDR_MAIN=${LABCTL_SLURM_ADDR_MAIN:-10.230.0.1}
ADDR_NS=${LABCTL_SLURM_ADDR:-10.230.0.2}
HOSTS_YAML=${LABCTL_SLURM_HOSTS_YAML:-$REPO/build/slurm-lab/hosts.yaml}
CTLD_PORT=$((PORT_BASE + 10))
SLURMD_PORT=$((PORT_BASE + 11))
DBD_PORT=$((PORT_BASE + 13))
DB_PORT=$((PORT_BASE + 14))
SSH_PORT=$((PORT_BASE + 22))
ETC=$STATE/etc
CONF=$ETC/slurm.conf
MUNGE_KEY=$STATE/munge/munge.key
MUNGE_SOCK=$RUN/munge/munge.socket
DB_DIR=$STATE/mysql
DB_PASS_FILE=$STATE/db.password
NODE_GROUP=${LABCTL_SLURM_GROUP:-$NAME-docker}
NODE_USER=$NAME-node
N1_STATE=$STATE/n1
N1_RUN=$RUN/n1
N2_STATE=$STATE/n2
N2_RUN=$RUN/n2
N1_SOCK=$N1_RUN/docker.sock
N2_SOCK=$N2_RUN/docker.sock
CTLD_HOST=$(hostname -s)
DOCKER_BIN=$(command -v docker || echo /usr/bin/docker)
PKGS=(slurm-wlm slurmdbd munge mariadb-server)

say() { printf 'slurm-lab: %s\n' "$*"; }
die() { printf 'slurm-lab: error: %s\n' "$*" >&2; exit 1; }
# Any command that fails says so, with where, and where the logs are: never a silent exit.
on_error() {
  local rc=$?
  [ "$BASH_SUBSHELL" = 0 ] || return "$rc"  # the shell that ran the subshell reports it
  printf 'slurm-lab: error: exit %s from: %s (%s line %s, in %s); logs: %s\n' \
    "$rc" "$BASH_COMMAND" "$0" "${BASH_LINENO[0]}" "${FUNCNAME[1]:-main}" "$LOGS" >&2
}
trap on_error ERR
need_root() { [ "$(id -u)" = 0 ] || die "run as root (it starts munged, mariadbd and the Slurm daemons)"; }

# The sim-lab and remote-lab instances that give the two nodes their Docker daemons.
n1_lab() {
  LABCTL_SIM_STATE=$N1_STATE LABCTL_SIM_RUN=$N1_RUN LABCTL_SIM_LOGS=$LOGS/n1 LABCTL_SIM_HOSTS=sim-h100 \
    LABCTL_SIM_LAB_DIR=$N1_STATE LABCTL_SIM_CONTAINERD_NS=$NAME-n1 bash "$REPO/scripts/sim-lab.sh" "$@"
}
n2_lab() {
  LABCTL_REMOTE_NAME=$NS LABCTL_REMOTE_ADDR_MAIN=$ADDR_MAIN LABCTL_REMOTE_ADDR=$ADDR_NS \
    LABCTL_REMOTE_SSH_PORT=$SSH_PORT LABCTL_REMOTE_USER=$NODE_USER LABCTL_REMOTE_GROUP=$NODE_GROUP \
    LABCTL_REMOTE_STATE=$N2_STATE LABCTL_REMOTE_RUN=$N2_RUN LABCTL_REMOTE_LOGS=$LOGS/n2 \
    LABCTL_REMOTE_HOSTS_YAML=$N2_STATE/hosts.yaml bash "$REPO/scripts/remote-lab.sh" "$@"
}

alive() {  # PIDFILE WORD: the pid file names a live process whose command line contains WORD
  local pid
  [ -s "$1" ] || return 1
  pid=$(tr -dc 0-9 <"$1")
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -F -- "$2" >/dev/null
}
running() { [ -d "/proc/$1" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }
stop_pidfile() {  # PIDFILE WORD [GRACE]
  local file=$1 what=$2 grace=${3:-15} pid
  if ! alive "$file" "$what"; then rm -f "$file"; return 0; fi
  pid=$(tr -dc 0-9 <"$file")
  say "stopping $what (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 $((grace * 10))); do running "$pid" || break; sleep 0.1; done
  if running "$pid"; then say "$what did not stop in ${grace}s: SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; fi
  rm -f "$file"
}
wait_for() {  # SECONDS WHAT COMMAND...: retry COMMAND every 0.25 s
  local limit=$1 what=$2; shift 2
  for _ in $(seq 1 $((limit * 4))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.25; done
  die "$what did not come up within ${limit}s (logs: $LOGS)"
}
write_if_changed() {  # DEST MODE, content on stdin; returns 0 if it changed
  local tmp; tmp=$(mktemp)
  cat >"$tmp"
  if cmp -s "$tmp" "$1"; then rm -f "$tmp"; return 1; fi
  install -m "$2" "$tmp" "$1"; rm -f "$tmp"; say "wrote $1"
}

ensure_packages() {
  local missing=() p
  for p in "${PKGS[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p"); done
  for p in slurmctld slurmd slurmdbd munged mariadbd; do command -v "$p" >/dev/null || [ -x "/usr/sbin/$p" ] || missing+=("$p"); done
  if [ ${#missing[@]} -eq 0 ]; then say "packages: ${PKGS[*]} installed"; return; fi
  command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get: install ${PKGS[*]} by hand"
  mkdir -p "$LOGS"
  say "installing ${PKGS[*]} (apt; log $LOGS/apt.log); the packages' own services are not started"
  # Debian starts a package's daemon on install unless policy-rc.d says no: this lab runs its own.
  local policy=/usr/sbin/policy-rc.d added=""
  if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod 0755 "$policy"; added=1; fi
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${PKGS[@]}"; } >"$LOGS/apt.log" 2>&1 \
    || { [ -z "$added" ] || rm -f "$policy"; tail -20 "$LOGS/apt.log" >&2; die "apt-get install ${PKGS[*]} failed"; }
  [ -z "$added" ] || rm -f "$policy"
}

# --- the nodes' Docker daemons ---------------------------------------------------------------------
gpu_json() {  # HOST COUNT: a simulated nvidia-smi configuration of COUNT H100s with fixed UUIDs
  local host=$1 count=$2 i
  printf '{\n  "host": "%s",\n  "driver_version": "580.95.05",\n  "cuda_version": "13.0",\n  "gpus": [\n' "$host"
  for i in $(seq 0 $((count - 1))); do
    printf '    {"name": "Simulated NVIDIA H100 80GB HBM3", "memory_total_mib": 81559, "memory_used_mib": 0, "compute_cap": "9.0",\n'
    printf '     "uuid": "GPU-51a00000-0000-4000-8000-%s%02d", "pci_bus_id": "00000000:%02X:00.0"}%s\n' \
      "$(printf '%s' "$host" | sha256sum | cut -c1-10)" "$i" $((24 + i)) "$([ "$i" = $((count - 1)) ] || echo ,)"
  done
  printf '  ],\n  "processes": []\n}\n'
}

ensure_node_daemons() {
  say "node n1: a simulated GPU dockerd of its own (scripts/sim-lab.sh instance under $N1_STATE)"
  n1_lab up | sed 's/^/  /'
  say "node n2: namespace $NS with dockerd and sshd (scripts/remote-lab.sh instance under $N2_STATE)"
  n2_lab up | sed 's/^/  /'
  # Both daemons accept this lab's group on their socket: a second Unix user's job reaches them.
  chgrp "$NODE_GROUP" "$N1_SOCK" && chmod 0660 "$N1_SOCK"
  gpu_json n1 4 | write_if_changed "$N1_STATE/gpus.json" 0644 || true
  gpu_json n2 2 | write_if_changed "$N2_STATE/gpus.json" 0644 || true
}

# --- GPU device files --------------------------------------------------------------------------------
ensure_devices() {  # NODE COUNT
  local dir=$STATE/dev/$1 i
  mkdir -p "$dir"
  for i in $(seq 0 $(($2 - 1))); do
    if [ ! -c "$dir/nvidia$i" ]; then rm -f "$dir/nvidia$i"; mknod -m 0666 "$dir/nvidia$i" c 195 "$i"; fi
  done
}

# --- munge -------------------------------------------------------------------------------------------
ensure_munge() {
  mkdir -p "$STATE/munge" "$RUN/munge" "$LOGS"
  if [ ! -s "$MUNGE_KEY" ]; then
    say "generating munge key $MUNGE_KEY"
    dd if=/dev/urandom of="$MUNGE_KEY" bs=1024 count=1 status=none
  fi
  chown -R munge:munge "$STATE/munge" "$RUN/munge"
  chmod 0700 "$STATE/munge"; chmod 0400 "$MUNGE_KEY"; chmod 0755 "$RUN/munge"
  touch "$LOGS/munged.log"; chown munge:munge "$LOGS/munged.log"
  if alive "$RUN/munge/munged.pid" munged; then say "munged: running (socket $MUNGE_SOCK)"; return; fi
  say "starting munged (socket $MUNGE_SOCK, log $LOGS/munged.log)"
  runuser -u munge -- /usr/sbin/munged --key-file="$MUNGE_KEY" --socket="$MUNGE_SOCK" \
    --pid-file="$RUN/munge/munged.pid" --log-file="$LOGS/munged.log" --seed-file="$STATE/munge/munged.seed"
  wait_for 10 munged munge -S "$MUNGE_SOCK" -n
}

# --- MariaDB and slurmdbd ----------------------------------------------------------------------------
db_client() { mariadb --no-defaults --protocol=socket --socket="$RUN/mysql.sock" -u root "$@"; }

ensure_mariadb() {
  mkdir -p "$DB_DIR" "$RUN"
  if [ ! -d "$DB_DIR/mysql" ]; then
    say "initialising the accounting database in $DB_DIR"
    mariadb-install-db --no-defaults --user=root --datadir="$DB_DIR" --auth-root-authentication-method=socket \
      --skip-test-db >"$LOGS/mariadb-install.log" 2>&1 || { tail -20 "$LOGS/mariadb-install.log" >&2; die "mariadb-install-db failed"; }
  fi
  if ! alive "$RUN/mariadbd.pid" mariadbd; then
    say "starting mariadbd (127.0.0.1:$DB_PORT, data $DB_DIR, log $LOGS/mariadbd.log)"
    setsid -f /usr/sbin/mariadbd --no-defaults --user=root --datadir="$DB_DIR" --socket="$RUN/mysql.sock" \
      --port="$DB_PORT" --bind-address=127.0.0.1 --pid-file="$RUN/mariadbd.pid" --log-error="$LOGS/mariadbd.log" \
      --innodb-buffer-pool-size=32M --innodb-log-file-size=16M --performance-schema=OFF </dev/null >/dev/null 2>&1
    wait_for 30 mariadbd db_client -e 'select 1'
  else
    say "mariadbd: running (127.0.0.1:$DB_PORT)"
  fi
  [ -s "$DB_PASS_FILE" ] || (umask 077; head -c 24 /dev/urandom | base64 | tr -dc A-Za-z0-9 >"$DB_PASS_FILE")
  local pass; pass=$(cat "$DB_PASS_FILE")
  db_client <<SQL
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
SQL
}

write_configs() {
  mkdir -p "$ETC" "$STATE/ctld" "$STATE/spool" "$LOGS"
  local pass; pass=$(cat "$DB_PASS_FILE")
  write_if_changed "$ETC/slurmdbd.conf" 0600 <<EOF || true
# Written by scripts/slurm-lab.sh ($NAME): slurmdbd with this lab's MariaDB.
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCK
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
PidFile=$RUN/slurmdbd.pid
LogFile=$LOGS/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$pass
StorageLoc=slurm_acct_db
EOF
  write_if_changed "$CONF" 0644 <<EOF || true
# Written by scripts/slurm-lab.sh ($NAME): a test cluster with simulated GPUs. Short timeouts for tests.
ClusterName=$NAME
SlurmctldHost=$CTLD_HOST($ADDR_MAIN)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCK
CredType=cred/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
DefMemPerCPU=512
SlurmdParameters=config_overrides
GresTypes=gpu
MpiDefault=none
ReturnToService=2
SlurmdTimeout=10
SlurmctldTimeout=10
MessageTimeout=5
KillWait=5
InactiveLimit=0
MinJobAge=600
JobRequeue=0
SchedulerParameters=sched_min_interval=200000
Epilog=$ETC/epilog.sh
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
# The munge socket for connections to slurmdbd (AuthInfo covers only the others).
AccountingStoragePass=$MUNGE_SOCK
AccountingStorageTRES=gres/gpu
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$LOGS/jobcomp.log
NodeName=n1 NodeHostname=$CTLD_HOST NodeAddr=$ADDR_MAIN CPUs=8 RealMemory=16384 Gres=gpu:4 State=UNKNOWN
NodeName=n2 NodeHostname=$NS NodeAddr=$ADDR_NS CPUs=8 RealMemory=16384 Gres=gpu:2 State=UNKNOWN
PartitionName=gpu Nodes=n1,n2 Default=YES MaxTime=60 DefaultTime=10 State=UP
EOF
  write_if_changed "$ETC/gres.conf" 0644 <<EOF || true
AutoDetect=off
NodeName=n1 Name=gpu File=$STATE/dev/n1/nvidia[0-3]
NodeName=n2 Name=gpu File=$STATE/dev/n2/nvidia[0-1]
EOF
  write_if_changed "$ETC/epilog.sh" 0755 <<EOF || true
#!/bin/sh
# Written by scripts/slurm-lab.sh ($NAME). The engine is Docker's process, not the job's: after a SIGKILL
# or a node failure it can outlive its job. Remove what carries this job's label from the node's Docker.
case "\${SLURMD_NODENAME:-}" in
  n1) sock=$N1_SOCK ;;
  n2) sock=$N2_SOCK ;;
  *) exit 0 ;;
esac
ids=\$($DOCKER_BIN -H "unix://\$sock" ps -aq --filter "label=labctl.slurm.job=\${SLURM_JOB_ID:-none}" 2>/dev/null)
[ -z "\$ids" ] || $DOCKER_BIN -H "unix://\$sock" rm -f \$ids >/dev/null 2>&1
exit 0
EOF
}

ensure_slurmdbd() {
  if alive "$RUN/slurmdbd.pid" slurmdbd; then say "slurmdbd: running (127.0.0.1:$DBD_PORT)"; return; fi
  # slurmdbd reads slurmdbd.conf from the folder of SLURM_CONF.
  say "starting slurmdbd (127.0.0.1:$DBD_PORT, log $LOGS/slurmdbd.log)"
  SLURM_CONF=$CONF setsid -f /usr/sbin/slurmdbd </dev/null >>"$LOGS/slurmdbd.out" 2>&1
  wait_for 30 slurmdbd sh -c "SLURM_CONF='$CONF' sacctmgr -n list cluster"
}

ensure_slurmctld() {
  if alive "$RUN/slurmctld.pid" slurmctld; then
    say "slurmctld: running ($ADDR_MAIN:$CTLD_PORT); re-reading its configuration"
    SLURM_CONF=$CONF scontrol reconfigure
    return
  fi
  say "starting slurmctld ($ADDR_MAIN:$CTLD_PORT, log $LOGS/slurmctld.log)"
  SLURM_CONF=$CONF setsid -f /usr/sbin/slurmctld -f "$CONF" </dev/null >>"$LOGS/slurmctld.out" 2>&1
  wait_for 30 slurmctld env SLURM_CONF="$CONF" scontrol ping
}

ensure_accounts() {
  local sam=(env SLURM_CONF="$CONF" sacctmgr -i)
  "${sam[@]}" -n list cluster format=cluster%40 | grep -qw "$NAME" || "${sam[@]}" add cluster "$NAME" >/dev/null
  "${sam[@]}" -n list account format=account%40 | grep -qw lab || "${sam[@]}" add account lab cluster="$NAME" \
    description="labctl test lab" organization=labctl >/dev/null
  "${sam[@]}" -n list qos format=name%40 | grep -qw normal || "${sam[@]}" add qos normal >/dev/null
  local u
  for u in root $NODE_USER; do
    "${sam[@]}" -n list user "$u" format=user%40 | grep -qw "$u" || "${sam[@]}" add user "$u" account=lab cluster="$NAME" >/dev/null
  done
}

ensure_slurmd() {  # NODE: n1 in the main namespace, n2 in $NS
  local node=$1 pidfile=$RUN/slurmd-$1.pid
  mkdir -p "$STATE/spool/$node"
  if alive "$pidfile" slurmd; then say "slurmd $node: running"; return; fi
  say "starting slurmd $node (log $LOGS/slurmd-$node.log)"
  if [ "$node" = n1 ]; then
    SLURM_CONF=$CONF setsid -f /usr/sbin/slurmd -f "$CONF" -N n1 </dev/null >>"$LOGS/slurmd-n1.out" 2>&1
  else
    # nsenter, not `ip netns exec`: that remounts /sys and slurmd then finds no /sys/fs/cgroup.
    SLURM_CONF=$CONF setsid -f nsenter --net="/var/run/netns/$NS" --uts="$N2_RUN/uts" \
      /usr/sbin/slurmd -f "$CONF" -N n2 </dev/null >>"$LOGS/slurmd-n2.out" 2>&1
  fi
  wait_for 20 "slurmd $node" alive "$pidfile" slurmd
}

node_state() { SLURM_CONF=$CONF sinfo -h -N -n "$1" -o '%T'; }

ensure_nodes_idle() {
  local node state
  for node in n1 n2; do
    for _ in $(seq 1 120); do
      state=$(node_state "$node" || true)
      case $state in idle* | mixed* | allocated*) break ;; esac
      # A node drained by an earlier run of this lab (a killed slurmd, a GPU count it could not see then).
      case $state in drain* | down*) SLURM_CONF=$CONF scontrol update nodename="$node" state=resume 2>/dev/null || true ;; esac
      sleep 0.25
    done
    case $state in idle* | mixed* | allocated*) say "node $node: $state ($(SLURM_CONF=$CONF sinfo -h -N -n "$node" -o '%G'))" ;;
      *) die "node $node is $state: $(SLURM_CONF=$CONF sinfo -h -R -n "$node" -o '%E' || true) (see $LOGS/slurmd-$node.log)" ;; esac
  done
}

check_gpus() {
  local out
  # A re-run while jobs hold the GPUs (a test restarting a killed slurmd) has nothing to prove here.
  if [ -n "$(SLURM_CONF=$CONF squeue -h -o %i)" ]; then say "check: jobs are queued or running: GPU check skipped"; return; fi
  out=$(SLURM_CONF=$CONF timeout 60 srun -w n1 --gres=gpu:2 -t 1 -Q sh -c 'echo "$SLURMD_NODENAME GPUs ${SLURM_JOB_GPUS:-$CUDA_VISIBLE_DEVICES}"' 2>&1) \
    || die "a 2-GPU job did not run on n1: $out"
  say "check: srun --gres=gpu:2 on n1 -> $out"
}

write_hosts_yaml() {
  mkdir -p "$(dirname "$HOSTS_YAML")"
  write_if_changed "$HOSTS_YAML" 0644 <<EOF || say "$HOSTS_YAML: up to date"
# labctl hosts: the Slurm test cluster from scripts/slurm-lab.sh (simulated GPUs: never real-gpu).
clusters:
  $NAME:
    slurm_conf: $CONF
    partition: gpu
    account: lab
    qos: normal
    time: 10
    simulated: true
    nodes:
      n1:
        docker: unix://$N1_SOCK
        nvidia_smi: ["$N1_STATE/bin/nvidia-smi", "--sim-config", "$N1_STATE/gpus.json"]
      n2:
        docker: ssh://$NODE_USER@$ADDR_NS:$SSH_PORT
        nvidia_smi: ["$N2_STATE/bin/nvidia-smi", "--sim-config", "$N2_STATE/gpus.json"]
        socket: $N2_SOCK
EOF
}

up() {
  need_root
  local t0=$SECONDS
  mkdir -p "$STATE" "$RUN" "$LOGS"
  ensure_packages
  ensure_node_daemons
  ensure_devices n1 4
  ensure_devices n2 2
  ensure_munge
  ensure_mariadb
  write_configs
  ensure_slurmdbd
  ensure_accounts
  ensure_slurmctld
  ensure_slurmd n1
  ensure_slurmd n2
  ensure_nodes_idle
  check_gpus
  write_hosts_yaml
  say "ready in $((SECONDS - t0)) s: SLURM_CONF=$CONF (cluster $NAME, nodes n1 with 4 and n2 with 2 simulated GPUs)"
}

status() {
  local ok=0 f
  for f in munge/munged.pid:munged mariadbd.pid:mariadbd slurmdbd.pid:slurmdbd slurmctld.pid:slurmctld slurmd-n1.pid:slurmd slurmd-n2.pid:slurmd; do
    if alive "$RUN/${f%%:*}" "${f##*:}"; then say "${f%%.pid*}: running"; else say "${f%%.pid*}: down"; ok=1; fi
  done
  n1_lab status | sed 's/^/  n1 /' || ok=1
  n2_lab status | sed 's/^/  n2 /' || ok=1
  return $ok
}

down() {
  need_root
  stop_pidfile "$RUN/slurmd-n2.pid" slurmd
  stop_pidfile "$RUN/slurmd-n1.pid" slurmd
  stop_pidfile "$RUN/slurmctld.pid" slurmctld
  stop_pidfile "$RUN/slurmdbd.pid" slurmdbd
  stop_pidfile "$RUN/mariadbd.pid" mariadbd 30
  stop_pidfile "$RUN/munge/munged.pid" munged
  if [ -d "$N2_STATE" ]; then n2_lab down | sed 's/^/  /'; fi
  if [ -d "$N1_STATE" ]; then n1_lab stop | sed 's/^/  /'; fi
  say "down (state kept in $STATE)"
}

purge() {
  down
  if [ -d "$N2_STATE" ]; then n2_lab purge | sed 's/^/  /'; fi
  if [ -d "$N1_STATE" ]; then n1_lab purge | sed 's/^/  /'; fi
  say "deleting $STATE, $RUN, $LOGS and $HOSTS_YAML"
  rm -rf "$STATE" "$RUN" "$LOGS" "$HOSTS_YAML"
}

case "${1:-up}" in
  up) up ;;
  status) status ;;
  down) down ;;
  purge) purge ;;
  *) die "usage: $0 [up|status|down|purge]" ;;
esac

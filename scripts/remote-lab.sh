#!/usr/bin/env bash
# A second Docker host on this machine, reached the way Docker reaches remote daemons: over SSH.
#
#   scripts/remote-lab.sh [up]     set up (idempotent; safe to re-run while up; repairs what died)
#   scripts/remote-lab.sh status   say what is up
#   scripts/remote-lab.sh down     stop its processes, delete the namespace and veth (keeps images)
#   scripts/remote-lab.sh purge    down, then delete its state, the client key and the ssh Include
#
# Host `labb`: network namespace labb, veth vlabb0 10.201.0.1/30 (main) <-> vlabb1 10.201.0.2/30
# (labb). Inside its network and UTS namespaces (hostname labb): a dockerd with its own socket,
# data/exec root, daemon.json and a simulated NVIDIA device driver; an sshd on 10.201.0.2:22 for
# account labctl-remote (DOCKER_HOST set to that dockerd); and the lab registry (main
# 127.0.0.1:5000) forwarded to labb's 127.0.0.1:5000, so image references are identical on both
# hosts. The main Docker daemon is never touched. Needs root. Writes build/remote-lab/hosts.yaml
# in the checkout. Namespaces and processes do not survive a reboot: run it again after one.
#
# Everything it makes is named by the variables below (defaults: the `labb` lab above), so a second
# instance (a test's) can live beside labb without touching it:
#   LABCTL_REMOTE_NAME        labb                  netns, hostname and hosts.yaml entry (<= 13 chars)
#   LABCTL_REMOTE_VETH_MAIN   v<name>0              veth end in the main namespace
#   LABCTL_REMOTE_VETH_NS     v<name>1              veth end inside the namespace
#   LABCTL_REMOTE_ADDR_MAIN   10.201.0.1            /30 address of the main end
#   LABCTL_REMOTE_ADDR        10.201.0.2            /30 address inside the namespace (sshd listens here)
#   LABCTL_REMOTE_SSH_PORT    22                    sshd's port
#   LABCTL_REMOTE_USER        labctl-remote         the account docker and ssh log in as
#   LABCTL_REMOTE_GROUP       <user>-docker         the group that may use the host's docker socket
#   LABCTL_REMOTE_STATE       /var/lib/labctl-<name>  data: docker data root, keys, configs, stand-ins
#   LABCTL_REMOTE_RUN         /var/run/labctl-<name>  sockets, pid files, the UTS namespace
#   LABCTL_REMOTE_LOGS        /var/log/labctl-<name>  dockerd, sshd, forwarder and apt logs
#   LABCTL_REMOTE_SSH_CONFIG  ~/.ssh/config         the ssh client config that gets the Include line
#   LABCTL_REMOTE_HOSTS_YAML  build/remote-lab/hosts.yaml in this checkout
set -Eeuo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
NS=${LABCTL_REMOTE_NAME:-labb}
VETH_MAIN=${LABCTL_REMOTE_VETH_MAIN:-v${NS}0}
VETH_NS=${LABCTL_REMOTE_VETH_NS:-v${NS}1}
ADDR_MAIN=${LABCTL_REMOTE_ADDR_MAIN:-10.201.0.1}
ADDR_NS=${LABCTL_REMOTE_ADDR:-10.201.0.2}
PREFIX=30
SSH_PORT=${LABCTL_REMOTE_SSH_PORT:-22}
REGISTRY_PORT=5000
REMOTE_USER=${LABCTL_REMOTE_USER:-labctl-remote}
SOCKET_GROUP=${LABCTL_REMOTE_GROUP:-$REMOTE_USER-docker}
STATE=${LABCTL_REMOTE_STATE:-/var/lib/labctl-$NS}
RUN=${LABCTL_REMOTE_RUN:-/var/run/labctl-$NS}
LOGS=${LABCTL_REMOTE_LOGS:-/var/log/labctl-$NS}
SOCK=$RUN/docker.sock
DOCKERD_PID=$RUN/dockerd.pid
SSHD_PID=$RUN/sshd.pid
BIN=$STATE/bin
GPUS=$STATE/gpus.json
CLIENT_KEY=$STATE/client_key
KNOWN_HOSTS=$STATE/known_hosts
SSH_SNIPPET=$STATE/ssh_config
SSHD_CONFIG=$STATE/sshd_config
HOST_KEY=$STATE/ssh_host_ed25519_key
AUTH_KEYS=$STATE/authorized_keys
USER_HOME=$STATE/home
FWD_MAIN_PID=$RUN/forward-main.pid
FWD_NS_PID=$RUN/forward-labb.pid
UTS_NS=$RUN/uts
SSH_WRAPPER=$STATE/ssh-bin
# ssh reads ~/.ssh/config from the passwd home, whatever $HOME says (sudo, CI).
DEFAULT_SSH_CONFIG=$(getent passwd "$(id -u)" | cut -d: -f6)/.ssh/config
SSH_USER_CONFIG=${LABCTL_REMOTE_SSH_CONFIG:-$DEFAULT_SSH_CONFIG}
HOSTS_YAML=${LABCTL_REMOTE_HOSTS_YAML:-$REPO/build/remote-lab/hosts.yaml}
if [ "$SSH_PORT" = 22 ]; then
  DOCKER_URL=ssh://$REMOTE_USER@$ADDR_NS
  KNOWN_HOST=$ADDR_NS
else
  DOCKER_URL=ssh://$REMOTE_USER@$ADDR_NS:$SSH_PORT
  KNOWN_HOST="[$ADDR_NS]:$SSH_PORT"
fi

say() { printf 'remote-lab: %s\n' "$*"; }
die() { printf 'remote-lab: error: %s\n' "$*" >&2; exit 1; }
# Any command that fails says so, with where, and where the logs are: never a silent exit.
on_error() {
  local rc=$?
  [ "$BASH_SUBSHELL" = 0 ] || return "$rc"  # the shell that ran the subshell reports it
  printf 'remote-lab: error: exit %s from: %s (%s line %s, in %s); logs: %s\n' \
    "$rc" "$BASH_COMMAND" "$0" "${BASH_LINENO[0]}" "${FUNCNAME[1]:-main}" "$LOGS" >&2
}
trap on_error ERR
# nsenter, not `ip netns exec`: the latter also enters a new mount namespace with a fresh /sys,
# which hides /sys/fs/cgroup ("failed to start daemon: Devices cgroup isn't mounted").
# The host also has its own UTS namespace, so `hostname` and `docker info` say labb.
IN_NS=(nsenter --net="/var/run/netns/$NS" --uts="$UTS_NS")
in_ns() { "${IN_NS[@]}" "$@"; }
# (No `cmd | grep -q` below: with pipefail, grep -q quitting early can fail the pipeline by SIGPIPE.)
ns_exists() { [ -e "/var/run/netns/$NS" ] && ip netns list | cut -d' ' -f1 | grep -x "$NS" >/dev/null; }
labb_docker() { docker -H "unix://$SOCK" "$@"; }
# ssh, and docker's ssh:// transport (which runs the `ssh` on PATH), reading the ssh config in use:
# the user's own, or through a wrapper that passes -F when LABCTL_REMOTE_SSH_CONFIG names another.
over_ssh() {
  if [ "$SSH_USER_CONFIG" = "$DEFAULT_SSH_CONFIG" ]; then "$@"; else PATH="$SSH_WRAPPER:$PATH" "$@"; fi
}

# A pid file names a live process whose command line contains $2.
alive() {
  local pid
  [ -s "$1" ] || return 1
  pid=$(tr -dc 0-9 <"$1")
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -F -- "$2" >/dev/null
}

# A process that exists and is not a zombie (PID 1 here may reap orphans only after a while).
running() { [ -d "/proc/$1" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }

# Stop the process a pid file names (SIGTERM, then SIGKILL after $3 seconds).
stop_pidfile() {
  local file=$1 what=$2 grace=${3:-10} pid
  if ! alive "$file" "$what"; then rm -f "$file"; return 0; fi
  pid=$(tr -dc 0-9 <"$file")
  say "stopping $what (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 $((grace * 10))); do running "$pid" || break; sleep 0.1; done
  if running "$pid"; then say "$what did not stop in ${grace}s: SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; fi
  rm -f "$file"
}

# Start a detached process in its own session (it outlives this script); it writes its own pid file.
spawn() {
  local log=$1; shift
  setsid -f "$@" </dev/null >>"$log" 2>&1
}

need_root() { [ "$(id -u)" = 0 ] || die "run as root (it creates a network namespace and starts dockerd and sshd)"; }

ensure_tools() {
  local t
  for t in ip nsenter unshare findmnt dockerd docker python3 setsid; do command -v "$t" >/dev/null || die "$t not found: run \`make docker-lab\` first"; done
  if [ ! -x /usr/sbin/sshd ] || ! command -v ssh-keygen >/dev/null || ! command -v ssh >/dev/null; then
    command -v apt-get >/dev/null || die "no sshd and no apt-get: install OpenSSH server and client by hand"
    say "installing openssh-server and openssh-client (apt; log $LOGS/apt.log)"
    mkdir -p "$LOGS"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server openssh-client; } \
      >"$LOGS/apt.log" 2>&1 || { tail -20 "$LOGS/apt.log" >&2; die "apt-get install openssh-server failed"; }
  fi
  mkdir -p "$STATE" "$RUN" "$LOGS" "$BIN" /run/sshd
  chmod 0755 "$STATE" "$RUN"
}

# --- network -------------------------------------------------------------------------------------
ensure_network() {
  if ns_exists; then say "netns $NS: present"; else say "creating netns $NS"; ip netns add "$NS"; fi
  if ! nsenter --uts="$UTS_NS" true 2>/dev/null; then
    say "creating UTS namespace $UTS_NS (hostname $NS)"
    touch "$UTS_NS"
    unshare --uts="$UTS_NS" hostname "$NS"
  fi
  if ! in_ns ip link show "$VETH_NS" >/dev/null 2>&1; then
    if ip link show "$VETH_NS" >/dev/null 2>&1; then
      say "moving $VETH_NS into $NS"
    else
      ip link show "$VETH_MAIN" >/dev/null 2>&1 && { say "deleting stray $VETH_MAIN (its peer is gone)"; ip link del "$VETH_MAIN"; }
      say "creating veth $VETH_MAIN <-> $VETH_NS"
      ip link add "$VETH_MAIN" type veth peer name "$VETH_NS"
    fi
    ip link set "$VETH_NS" netns "$NS"
  fi
  ip -o addr show dev "$VETH_MAIN" | grep -F " $ADDR_MAIN/$PREFIX " >/dev/null \
    || { say "address $ADDR_MAIN/$PREFIX on $VETH_MAIN"; ip addr add "$ADDR_MAIN/$PREFIX" dev "$VETH_MAIN"; }
  in_ns ip -o addr show dev "$VETH_NS" | grep -F " $ADDR_NS/$PREFIX " >/dev/null \
    || { say "address $ADDR_NS/$PREFIX on $VETH_NS (in $NS)"; in_ns ip addr add "$ADDR_NS/$PREFIX" dev "$VETH_NS"; }
  ip link set "$VETH_MAIN" up
  in_ns ip link set "$VETH_NS" up
  in_ns ip link set lo up
  say "network: $VETH_MAIN $ADDR_MAIN/$PREFIX <-> $VETH_NS $ADDR_NS/$PREFIX in $NS, lo up"
}

# --- account -------------------------------------------------------------------------------------
ensure_account() {
  getent group "$SOCKET_GROUP" >/dev/null || { say "creating group $SOCKET_GROUP"; groupadd --system "$SOCKET_GROUP"; }
  if ! id "$REMOTE_USER" >/dev/null 2>&1; then
    say "creating account $REMOTE_USER (home $USER_HOME)"
    useradd --system --home-dir "$USER_HOME" --create-home --shell /bin/sh --groups "$SOCKET_GROUP" "$REMOTE_USER"
  fi
  id -nG "$REMOTE_USER" | tr " " "\n" | grep -x "$SOCKET_GROUP" >/dev/null || usermod -aG "$SOCKET_GROUP" "$REMOTE_USER"
  mkdir -p "$USER_HOME" && chown "$REMOTE_USER:" "$USER_HOME"
  # A locked password field ('!') refuses even key logins; '*' allows keys and no password.
  [ "$(getent shadow "$REMOTE_USER" | cut -d: -f2)" = "*" ] || usermod -p '*' "$REMOTE_USER"
  say "account $REMOTE_USER: groups $(id -nG "$REMOTE_USER" | tr ' ' ,)"
}

# --- simulated GPU bits on the daemon's PATH ----------------------------------------------------
install_file() {  # SRC DEST MODE: copy when different, say so
  if cmp -s "$1" "$2"; then return 0; fi
  install -m "$3" "$1" "$2"
  say "installed $2 (from ${1#"$REPO"/})"
}

ensure_gpu_sim() {
  install_file "$REPO/scripts/sim/nvidia-container-runtime-hook" "$BIN/nvidia-container-runtime-hook" 0755
  install_file "$REPO/scripts/sim/nvidia-smi" "$BIN/nvidia-smi" 0755
  install_file "$REPO/scripts/remote/gpus-labb.json" "$GPUS" 0644
  # Run from a copy, so a checkout that moves or goes away does not matter to a running lab.
  install_file "$REPO/scripts/remote/forward.py" "$STATE/forward.py" 0755
}

# --- dockerd inside the namespace ----------------------------------------------------------------
dockerd_answers() { timeout 5 docker -H "unix://$SOCK" version -f '{{.Server.Version}}' >/dev/null 2>&1; }

clear_stale_containerd() {
  local file=$RUN/exec/containerd/containerd.pid pid
  [ -s "$file" ] || return 0
  pid=$(tr -dc 0-9 <"$file")
  if alive "$file" "$RUN/exec/containerd"; then
    say "stopping the orphaned containerd of the previous dockerd (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do running "$pid" || break; sleep 0.1; done
    if alive "$file" "$RUN/exec/containerd"; then kill -KILL "$pid" 2>/dev/null || true; fi
  fi
  # dockerd would wait on a containerd whose pid still shows in /proc: wait out the zombie too.
  for _ in $(seq 1 100); do [ -n "$pid" ] && [ -d "/proc/$pid" ] && ! running "$pid" || break; sleep 0.1; done
  rm -f "$file"
}

dockerd_args() {
  printf '%s\n' --config-file "$STATE/daemon.json" \
    --host "unix://$SOCK" --group "$SOCKET_GROUP" \
    --data-root "$STATE/docker" --exec-root "$RUN/exec" --pidfile "$DOCKERD_PID" \
    --bridge=none --iptables=false --ip-masq=false
}

ensure_dockerd() {
  # Its own daemon.json: never /etc/docker/daemon.json of the main daemon; its own trust key, so
  # `docker info` reports an ID of its own (Docker 20.10 derives the ID from that key).
  write_if_changed "$STATE/daemon.json" 0644 <<EOF || true
{
  "deprecated-key-path": "$STATE/key.json",
  "log-driver": "json-file",
  "log-opts": {"max-size": "10m", "max-file": "3"}
}
EOF
  local wanted; wanted="$(dockerd_args; cat "$STATE/daemon.json")"
  if alive "$DOCKERD_PID" dockerd && dockerd_answers; then
    if [ "$wanted" = "$(cat "$RUN/dockerd.started-with" 2>/dev/null)" ]; then
      say "dockerd in $NS: answering on $SOCK (pid $(cat "$DOCKERD_PID"))"; return
    fi
    say "dockerd in $NS: its options changed: restarting it"
    stop_pidfile "$DOCKERD_PID" dockerd 30
  fi
  if alive "$DOCKERD_PID" dockerd; then
    local pid; pid=$(cat "$DOCKERD_PID")
    # A daemon that is still starting answers within seconds; one that does not is replaced.
    for _ in $(seq 1 40); do dockerd_answers && { say "dockerd in $NS: answering (pid $pid)"; return; }; sleep 0.25; done
    stop_pidfile "$DOCKERD_PID" dockerd 15
  fi
  # After a killed dockerd: its pid file, and the pid file of the containerd it managed, may name
  # processes that still show in /proc (not yet reaped, or a containerd left running); dockerd
  # then refuses to start, or waits forever on that containerd. Neither names a live dockerd here.
  rm -f "$DOCKERD_PID"
  clear_stale_containerd
  mkdir -p "$STATE/docker" "$RUN/exec"
  # Only this start's lines are shown when it fails; on a first run there is no log yet.
  local log_lines=0
  if [ -f "$LOGS/dockerd.log" ]; then log_lines=$(wc -l <"$LOGS/dockerd.log"); fi
  say "starting dockerd in $NS (socket $SOCK, data $STATE/docker, log $LOGS/dockerd.log)"
  local args; mapfile -t args < <(dockerd_args)
  # The no-op hook first on PATH registers Docker's `nvidia` device driver (simulated GPUs only).
  spawn "$LOGS/dockerd.log" env PATH="$BIN:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    "${IN_NS[@]}" dockerd "${args[@]}"
  local i
  for i in $(seq 1 120); do
    dockerd_answers && break
    # Fail fast when it died (its pid file is written early and removed on exit).
    [ "$i" -lt 8 ] || alive "$DOCKERD_PID" dockerd || break
    sleep 0.25
  done
  dockerd_answers || { tail -n +"$((log_lines + 1))" "$LOGS/dockerd.log" | tail -20 >&2; die "dockerd in $NS did not start (log above)"; }
  printf '%s\n' "$wanted" >"$RUN/dockerd.started-with"
  say "dockerd in $NS: up (pid $(cat "$DOCKERD_PID"), $(labb_docker version -f '{{.Server.Version}}'))"
}

# --- registry forwarders -------------------------------------------------------------------------
registry_answers() {  # run the check with "$@" as prefix (e.g. in_ns)
  "$@" python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=3)" \
    "http://127.0.0.1:$REGISTRY_PORT/v2/" >/dev/null 2>&1
}

ensure_forward() {  # PIDFILE LABEL LISTEN TARGET [prefix...]
  local pidfile=$1 label=$2 listen=$3 target=$4; shift 4
  if alive "$pidfile" "forward.py --listen $listen"; then say "forwarder $label $listen -> $target: running"; return; fi
  say "starting forwarder $label $listen -> $target"
  rm -f "$pidfile"
  spawn "$LOGS/forward-$label.log" "$@" python3 "$STATE/forward.py" \
    --listen "$listen" --target "$target" --pidfile "$pidfile"
  for _ in $(seq 1 40); do alive "$pidfile" forward.py && return; sleep 0.1; done
  tail -5 "$LOGS/forward-$label.log" >&2
  die "forwarder $label did not listen on $listen"
}

ensure_registry_path() {
  ensure_forward "$FWD_MAIN_PID" main "$ADDR_MAIN:$REGISTRY_PORT" "127.0.0.1:$REGISTRY_PORT"
  ensure_forward "$FWD_NS_PID" "$NS" "127.0.0.1:$REGISTRY_PORT" "$ADDR_MAIN:$REGISTRY_PORT" "${IN_NS[@]}"
  if registry_answers in_ns; then
    say "registry: 127.0.0.1:$REGISTRY_PORT answers inside $NS"
  elif registry_answers; then
    die "the registry answers in the main namespace but not through the forwarders (see $LOGS/forward-*.log)"
  else
    say "WARNING: no registry on 127.0.0.1:$REGISTRY_PORT in the main namespace (run \`make docker-lab\`); $NS pulls will fail until it is up"
  fi
}

# --- sshd inside the namespace -------------------------------------------------------------------
write_if_changed() {  # DEST MODE, content on stdin; returns 0 if it changed
  local tmp; tmp=$(mktemp)
  cat >"$tmp"
  if cmp -s "$tmp" "$1"; then rm -f "$tmp"; return 1; fi
  install -m "$2" "$tmp" "$1"; rm -f "$tmp"; say "wrote $1"
}

ensure_keys() {
  [ -s "$HOST_KEY" ] || { say "generating sshd host key $HOST_KEY"; ssh-keygen -q -t ed25519 -N '' -C "labctl-labb-host" -f "$HOST_KEY"; }
  [ -s "$CLIENT_KEY" ] || { say "generating client key $CLIENT_KEY"; ssh-keygen -q -t ed25519 -N '' -C "labctl-remote-client" -f "$CLIENT_KEY"; }
  chmod 0600 "$HOST_KEY" "$CLIENT_KEY"
  # StrictModes: the keys file must be root- or user-owned and not group/world-writable.
  write_if_changed "$AUTH_KEYS" 0644 <"$CLIENT_KEY.pub" || true
}

ensure_sshd() {
  ensure_keys
  local changed=""
  write_if_changed "$SSHD_CONFIG" 0644 <<EOF && changed=1
# labctl remote lab ($NS): written by scripts/remote-lab.sh
Port $SSH_PORT
ListenAddress $ADDR_NS
HostKey $HOST_KEY
PidFile $SSHD_PID
UsePAM no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
AllowUsers $REMOTE_USER
AuthorizedKeysFile $AUTH_KEYS
AllowTcpForwarding yes
X11Forwarding no
PrintMotd no
Subsystem sftp internal-sftp
Match User $REMOTE_USER
    SetEnv DOCKER_HOST=unix://$SOCK LABCTL_SIM_GPU_CONFIG=$GPUS
EOF
  /usr/sbin/sshd -t -f "$SSHD_CONFIG" || die "sshd rejects $SSHD_CONFIG"
  if alive "$SSHD_PID" "sshd" && [ -z "$changed" ]; then say "sshd in $NS: running on $ADDR_NS:$SSH_PORT (pid $(cat "$SSHD_PID"))"; return; fi
  if alive "$SSHD_PID" sshd; then stop_pidfile "$SSHD_PID" sshd 5; fi
  say "starting sshd in $NS on $ADDR_NS:$SSH_PORT (log $LOGS/sshd.log)"
  # -D keeps it in the foreground of its own session so the pid is the listener; -E logs to a file.
  rm -f "$SSHD_PID"
  spawn /dev/null "${IN_NS[@]}" /usr/sbin/sshd -D -f "$SSHD_CONFIG" -E "$LOGS/sshd.log"
  for _ in $(seq 1 40); do alive "$SSHD_PID" sshd && break; sleep 0.1; done
  alive "$SSHD_PID" sshd || { tail -5 "$LOGS/sshd.log" >&2; die "sshd in $NS did not start"; }
}

# --- ssh client configuration for root -----------------------------------------------------------
ensure_client_config() {
  write_if_changed "$KNOWN_HOSTS" 0644 <<EOF || true
$KNOWN_HOST $(cut -d' ' -f1,2 "$HOST_KEY.pub")
EOF
  write_if_changed "$SSH_SNIPPET" 0644 <<EOF || true
# labctl remote lab ($NS): written by scripts/remote-lab.sh; included from ~/.ssh/config
Host $ADDR_NS $NS
    HostName $ADDR_NS
    Port $SSH_PORT
    User $REMOTE_USER
    IdentityFile $CLIENT_KEY
    IdentitiesOnly yes
    UserKnownHostsFile $KNOWN_HOSTS
    StrictHostKeyChecking yes
    BatchMode yes
    ConnectTimeout 10
EOF
  local include="Include $SSH_SNIPPET"
  mkdir -p "$(dirname "$SSH_USER_CONFIG")" && chmod 0700 "$(dirname "$SSH_USER_CONFIG")"
  if [ -f "$SSH_USER_CONFIG" ] && grep -qxF "$include" "$SSH_USER_CONFIG"; then
    say "$SSH_USER_CONFIG: includes $SSH_SNIPPET"
  else
    # First in the file: an Include after a Host line would apply only inside that Host block.
    local tmp; tmp=$(mktemp)
    { echo "$include"; [ -f "$SSH_USER_CONFIG" ] && cat "$SSH_USER_CONFIG"; } >"$tmp"
    install -m 0600 "$tmp" "$SSH_USER_CONFIG"; rm -f "$tmp"
    say "$SSH_USER_CONFIG: added '$include' at the top (the rest of the file is unchanged)"
  fi
  [ "$SSH_USER_CONFIG" != "$DEFAULT_SSH_CONFIG" ] || return 0
  mkdir -p "$SSH_WRAPPER"
  write_if_changed "$SSH_WRAPPER/ssh" 0755 <<EOF || true
#!/bin/sh
# labctl remote lab ($NS): written by scripts/remote-lab.sh. ssh (and docker -H ssh://, when this folder is
# first on PATH) with the ssh config LABCTL_REMOTE_SSH_CONFIG named instead of ~/.ssh/config.
exec $(command -v ssh) -F "$SSH_USER_CONFIG" "\$@"
EOF
}

# --- registration and checks ---------------------------------------------------------------------
write_hosts_yaml() {
  mkdir -p "$(dirname "$HOSTS_YAML")"
  write_if_changed "$HOSTS_YAML" 0644 <<EOF || say "$HOSTS_YAML: up to date"
# labctl hosts: the simulated remote host from scripts/remote-lab.sh (root's ssh config reaches it).
hosts:
  $NS:
    docker: $DOCKER_URL
    nvidia_smi: ["$BIN/nvidia-smi", "--sim-config", "$GPUS"]   # run ON the host over ssh
    simulated: true
    socket: $SOCK   # its dockerd's socket as the host sees it (a resident run's watcher mounts it)
EOF
}

check_over_ssh() {
  local version gpu
  for _ in $(seq 1 20); do
    version=$(over_ssh timeout 20 docker -H "$DOCKER_URL" version -f '{{.Server.Version}}' 2>/dev/null) && break
    sleep 0.25
  done
  [ -n "${version:-}" ] || { over_ssh docker -H "$DOCKER_URL" version >&2 || true; tail -5 "$LOGS/sshd.log" >&2; die "docker -H $DOCKER_URL does not answer"; }
  gpu=$(over_ssh ssh "$REMOTE_USER@$ADDR_NS" "$BIN/nvidia-smi" --sim-config "$GPUS" --query-gpu=index,name --format=csv,noheader) \
    || die "nvidia-smi over ssh failed"
  say "check: docker -H $DOCKER_URL -> server $version; nvidia-smi over ssh -> $gpu"
}

print_usage_hint() {
  cat <<EOF
remote-lab: ready. Host $NS is $DOCKER_URL
  docker -H $DOCKER_URL info
  DOCKER_HOST=$DOCKER_URL docker compose -f FILE up -d      # host networking: no bridge on $NS
  ssh -N -L 18400:127.0.0.1:PORT $REMOTE_USER@$ADDR_NS      # reach a server bound to $NS's 127.0.0.1:PORT
  ssh $REMOTE_USER@$ADDR_NS $BIN/nvidia-smi --sim-config $GPUS -L
Host entry written to $HOSTS_YAML. To use it, either
  export LABCTL_HOSTS=$HOSTS_YAML
or merge its 'hosts:' entry into ~/.config/labctl/hosts.yaml (the user's file is not touched here).
Tear down: scripts/remote-lab.sh down   (after a reboot, re-run scripts/remote-lab.sh)
EOF
  [ "$SSH_USER_CONFIG" = "$DEFAULT_SSH_CONFIG" ] \
    || echo "ssh reaches $NS through $SSH_USER_CONFIG, not ~/.ssh/config: put $SSH_WRAPPER first on PATH."
}

up() {
  need_root
  local t0=$SECONDS
  ensure_tools
  ensure_network
  ensure_account
  ensure_gpu_sim
  ensure_dockerd
  ensure_registry_path
  ensure_sshd
  ensure_client_config
  write_hosts_yaml
  check_over_ssh
  say "done in $((SECONDS - t0)) s"
  print_usage_hint
}

# dockerd bind-mounts its data root onto itself and its network namespace under the exec root; a
# killed one leaves them, and that netns mount would keep labb's network alive after `ip netns del`.
unmount_under() {
  local dir mounts
  for dir in "$@"; do
    dir=$(realpath -m "$dir")  # findmnt reports /run, not the /var/run symlink
    mounts=$(findmnt -rn -o TARGET | awk -v d="$dir" '$0 == d || index($0, d "/") == 1' | sort -r)
    [ -z "$mounts" ] || { say "unmounting $(echo $mounts)"; echo "$mounts" | xargs -r umount -l; }
  done
}

down() {
  need_root
  stop_pidfile "$SSHD_PID" sshd 5
  stop_pidfile "$FWD_NS_PID" "forward.py" 5
  stop_pidfile "$FWD_MAIN_PID" "forward.py" 5
  # dockerd stops its containers and its containerd on SIGTERM.
  stop_pidfile "$DOCKERD_PID" dockerd 30
  clear_stale_containerd
  unmount_under "$RUN/exec" "$STATE/docker"
  if ns_exists; then
    local pids; pids=$(ip netns pids "$NS" || true)
    if [ -n "$pids" ]; then
      say "stopping what is left in $NS: $(echo $pids)"
      kill -TERM $pids 2>/dev/null || true; sleep 2
      pids=$(ip netns pids "$NS" || true); [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
    fi
    say "deleting netns $NS (and veth $VETH_NS)"
    ip netns del "$NS"
  fi
  if findmnt -n "$UTS_NS" >/dev/null 2>&1; then umount "$UTS_NS"; fi
  rm -f "$UTS_NS" "$RUN/dockerd.started-with"
  if ip link show "$VETH_MAIN" >/dev/null 2>&1; then say "deleting $VETH_MAIN"; ip link del "$VETH_MAIN" 2>/dev/null || true; fi
  rm -f "$SOCK"
  say "down (state kept in $STATE; the main Docker daemon was not touched)"
}

purge() {
  down
  if [ -f "$SSH_USER_CONFIG" ] && grep -qxF "Include $SSH_SNIPPET" "$SSH_USER_CONFIG"; then
    local tmp; tmp=$(mktemp)
    grep -vxF "Include $SSH_SNIPPET" "$SSH_USER_CONFIG" >"$tmp" || true
    install -m 0600 "$tmp" "$SSH_USER_CONFIG"; rm -f "$tmp"
    say "removed the Include line from $SSH_USER_CONFIG"
  fi
  if [ -d "$STATE" ]; then say "deleting $STATE"; rm -rf "$STATE"; fi
  rm -rf "$RUN" "$HOSTS_YAML"
  # The account and group are this instance's only if the account's home is this state's: another
  # instance's (labb's, when a test's purge got the wrong variables) is left alone.
  local home; home=$(getent passwd "$REMOTE_USER" | cut -d: -f6 || true)
  if [ -n "$home" ] && [ "$home" != "$USER_HOME" ]; then
    say "account $REMOTE_USER (home $home) belongs to another remote lab: left alone"
  else
    if [ -n "$home" ]; then say "deleting account $REMOTE_USER"; userdel "$REMOTE_USER"; fi
    if getent group "$SOCKET_GROUP" >/dev/null; then say "deleting group $SOCKET_GROUP"; groupdel "$SOCKET_GROUP"; fi
  fi
  say "purged"
}

status() {
  local ok=0
  ns_exists && say "netns $NS: present" || { say "netns $NS: absent"; ok=1; }
  if alive "$DOCKERD_PID" dockerd && dockerd_answers; then say "dockerd: answering on $SOCK"; else say "dockerd: down"; ok=1; fi
  alive "$SSHD_PID" sshd && say "sshd: running" || { say "sshd: down"; ok=1; }
  alive "$FWD_MAIN_PID" forward.py && alive "$FWD_NS_PID" forward.py && say "registry forwarders: running" \
    || { say "registry forwarders: down"; ok=1; }
  return $ok
}

case "${1:-up}" in
  up) up ;;
  down) down ;;
  purge) purge ;;
  status) status ;;
  *) die "usage: $0 [up|down|purge|status]" ;;
esac

#!/usr/bin/env bash
# The simulated GPU lab (test lab only, as root): two simulated GPU hosts on a machine without a GPU.
#
#   sim-h100  2x "Simulated NVIDIA H100 80GB HBM3" (81559 MiB), driver 580.95.05 / CUDA 13.0
#   sim-gb10  1x "Simulated NVIDIA GB10", unified memory (nvidia-smi says [N/A]), same driver
#
# Each host is its own second dockerd (own socket, data root, exec root, pid file, containerd
# namespace) whose PATH starts with /var/lib/labctl-sim/bin, which holds a no-op
# nvidia-container-runtime-hook: Docker 20.10 then registers its `nvidia` device driver, so
# `--gpus` and compose `driver: nvidia` device reservations start, with NVIDIA_VISIBLE_DEVICES set.
# The main daemon (default socket) is never touched. Both sim daemons pull from the shared loopback
# registry 127.0.0.1:5000 (started by scripts/docker-lab.sh).
#
# Writes: /var/lib/labctl-sim/{bin/,sim-h100.json,sim-gb10.json,<host>.daemon.json,*.log}
#         build/sim-lab/hosts.yaml (in this checkout; the hosts labctl reads)
# Idempotent: reuses sim daemons that already run; the stand-in configs are rewritten each run
# (back to the defaults above).
#
#   scripts/sim-lab.sh [up]   provision / reuse (what `make sim-lab` runs)
#   scripts/sim-lab.sh status say what runs
#   scripts/sim-lab.sh stop   stop the sim daemons this script started (by pid file), nothing else
#   scripts/sim-lab.sh purge  stop, then delete the state, run and logs folders and the hosts file
#
# Its state roots and names come from variables (defaults: the paths above), so that a second
# instance (a test's) runs its own daemons beside these without touching them:
#   LABCTL_SIM_STATE          /var/lib/labctl-sim   stand-ins, GPU configs, daemon.json, data roots
#   LABCTL_SIM_RUN            /var/run/labctl-sim   sockets, exec roots, pid files
#   LABCTL_SIM_LOGS           the state folder      dockerd and hook logs
#   LABCTL_SIM_LAB_DIR        build/sim-lab         the lab folder; hosts.yaml goes there
#   LABCTL_SIM_HOSTS          "sim-h100 sim-gb10"   which simulated hosts to provision (the first is the default)
#   LABCTL_SIM_CONTAINERD_NS  labctl                prefix of each daemon's containerd namespaces
set -Eeuo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
STATE=${LABCTL_SIM_STATE:-/var/lib/labctl-sim}
BIN=$STATE/bin
RUN=${LABCTL_SIM_RUN:-/var/run/labctl-sim}
LOGS=${LABCTL_SIM_LOGS:-$STATE}
REGISTRY_ADDR=${LABCTL_REGISTRY_ADDR:-127.0.0.1:5000}
BASE_IMAGE=${LABCTL_BASE_IMAGE:-labctl/base:bookworm}
HOSTS_FILE=${LABCTL_SIM_LAB_DIR:-$REPO/build/sim-lab}/hosts.yaml
CONTAINERD_NS=${LABCTL_SIM_CONTAINERD_NS:-labctl}
MARKER=LABCTL-SIM-STAND-IN
DRIVER=580.95.05
CUDA=13.0
read -r -a HOSTS <<<"${LABCTL_SIM_HOSTS:-sim-h100 sim-gb10}"

say() { printf 'sim-lab: %s\n' "$*"; }
die() { printf 'sim-lab: error: %s\n' "$*" >&2; exit 1; }
# Any command that fails says so, with where, and where the logs are: never a silent exit.
on_error() {
  local rc=$?
  [ "$BASH_SUBSHELL" = 0 ] || return "$rc"  # the shell that ran the subshell reports it
  printf 'sim-lab: error: exit %s from: %s (%s line %s, in %s); logs: %s\n' \
    "$rc" "$BASH_COMMAND" "$0" "${BASH_LINENO[0]}" "${FUNCNAME[1]:-main}" "$LOGS" >&2
}
trap on_error ERR
[ ${#HOSTS[@]} -gt 0 ] || die "LABCTL_SIM_HOSTS names no host (choose from: sim-h100 sim-gb10)"
for h in "${HOSTS[@]}"; do
  case $h in sim-h100 | sim-gb10) ;; *) die "LABCTL_SIM_HOSTS: unknown simulated host '$h' (choose from: sim-h100 sim-gb10)" ;; esac
done

# Per-host daemon layout. sim-h100 owns the paths named in the lab docs; sim-gb10 nests under gb10/.
sock_of() { case $1 in sim-h100) echo "$RUN/docker.sock" ;; *) echo "$RUN/${1#sim-}/docker.sock" ;; esac; }
data_of() { case $1 in sim-h100) echo "$STATE/docker" ;; *) echo "$STATE/${1#sim-}/docker" ;; esac; }
exec_of() { case $1 in sim-h100) echo "$RUN/exec" ;; *) echo "$RUN/${1#sim-}/exec" ;; esac; }
pid_of() { echo "$(dirname "$(sock_of "$1")")/docker.pid"; }
log_of() { echo "$LOGS/$1.dockerd.log"; }
hook_log_of() { echo "$LOGS/$1.hook.log"; }
sim_docker() { local h=$1; shift; env -u DOCKER_HOST -u DOCKER_CONTEXT docker -H "unix://$(sock_of "$h")" "$@"; }
main_docker() { env -u DOCKER_HOST -u DOCKER_CONTEXT docker "$@"; }

# ---- safety: never on a host with real NVIDIA tools or a driver ----
refuse_real_nvidia() {
  local found=() f
  local candidates=(/usr/bin/nvidia-smi /usr/bin/nvidia-container-runtime-hook /usr/bin/nvidia-container-toolkit
                    /usr/bin/nvidia-ctk /usr/local/bin/nvidia-smi /usr/local/bin/nvidia-container-runtime-hook)
  for f in nvidia-smi nvidia-container-runtime-hook; do
    f=$(command -v "$f" 2>/dev/null) && candidates+=("$f")
  done
  for f in "${candidates[@]}"; do
    [ -e "$f" ] && ! grep -q "$MARKER" "$f" 2>/dev/null && found+=("$f")
  done
  [ -e /proc/driver/nvidia/version ] && found+=(/proc/driver/nvidia/version)
  compgen -G '/dev/nvidia[0-9]*' >/dev/null && found+=(/dev/nvidia*)
  if [ ${#found[@]} -gt 0 ]; then
    die "real NVIDIA software or devices are present (${found[*]}): this is a GPU host, the simulated lab must never shadow its tools. Nothing was changed."
  fi
}

install_tools() {
  mkdir -p "$BIN" "$RUN" "$LOGS"
  local t changed=()
  for t in nvidia-smi nvidia-container-runtime-hook; do
    if ! cmp -s "$REPO/scripts/sim/$t" "$BIN/$t"; then
      install -m 0755 "$REPO/scripts/sim/$t" "$BIN/$t.tmp" && mv -f "$BIN/$t.tmp" "$BIN/$t"
      changed+=("$t")
    fi
  done
  if [ ${#changed[@]} -gt 0 ]; then say "installed ${changed[*]} into $BIN (a dedicated dir, on no system PATH)"
  else say "stand-ins in $BIN: up to date"; fi
}

write_configs() {
  local tmp
  tmp=$(mktemp "$STATE/.cfg.XXXXXX")
  cat >"$tmp" <<JSON
{
  "host": "sim-h100",
  "driver_version": "$DRIVER",
  "cuda_version": "$CUDA",
  "gpus": [
    {"name": "Simulated NVIDIA H100 80GB HBM3", "memory_total_mib": 81559, "memory_used_mib": 0,
     "unified_memory": false, "compute_cap": "9.0", "pci_bus_id": "00000000:18:00.0", "power_limit_w": 700},
    {"name": "Simulated NVIDIA H100 80GB HBM3", "memory_total_mib": 81559, "memory_used_mib": 0,
     "unified_memory": false, "compute_cap": "9.0", "pci_bus_id": "00000000:2A:00.0", "power_limit_w": 700}
  ],
  "processes": []
}
JSON
  mv -f "$tmp" "$STATE/sim-h100.json"
  tmp=$(mktemp "$STATE/.cfg.XXXXXX")
  cat >"$tmp" <<JSON
{
  "host": "sim-gb10",
  "driver_version": "$DRIVER",
  "cuda_version": "$CUDA",
  "gpus": [
    {"name": "Simulated NVIDIA GB10", "memory_total_mib": 0, "memory_used_mib": 0, "unified_memory": true,
     "compute_cap": "12.1", "pci_bus_id": "0000000F:01:00.0", "power_limit_w": null, "power_draw_w": 4.0,
     "pstate": "P8", "temperature_c": 40}
  ],
  "processes": []
}
JSON
  mv -f "$tmp" "$STATE/sim-gb10.json"
  chmod 0644 "$STATE/sim-h100.json" "$STATE/sim-gb10.json"
  say "stand-in configs (reset to defaults): $STATE/sim-h100.json, $STATE/sim-gb10.json"
}

daemon_pid() {
  local p; p=$(pid_of "$1")
  [ -s "$p" ] || return 1
  local pid; pid=$(cat "$p")
  [ -d "/proc/$pid" ] || return 1
  echo "$pid"
}

# A daemon on our socket counts as ours only if it runs with our hook dir first on its PATH.
is_our_daemon() {
  local pid
  pid=$(daemon_pid "$1") || return 1
  # (grep -q could quit before tr is done: a SIGPIPE that pipefail turns into "not ours".)
  tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -x "PATH=$BIN:.*" >/dev/null
}

answers() { sim_docker "$1" version --format '{{.Server.Version}}' >/dev/null 2>&1; }

ensure_daemon() {
  local h=$1 sock data exe pidf log conf
  sock=$(sock_of "$h"); data=$(data_of "$h"); exe=$(exec_of "$h"); pidf=$(pid_of "$h"); log=$(log_of "$h")
  conf=$STATE/$h.daemon.json
  if answers "$h"; then
    is_our_daemon "$h" || die "a Docker daemon answers on $sock but was not started by sim-lab (no $BIN first on its PATH): stop it yourself, then re-run"
    say "$h: sim daemon already running (pid $(daemon_pid "$h"), unix://$sock): reused"
    return
  fi
  command -v dockerd >/dev/null || die "dockerd not found: run \`make docker-lab\` first"
  mkdir -p "$data" "$exe" "$(dirname "$sock")"
  # An own (empty) daemon.json: /etc/docker/daemon.json belongs to the main daemon.
  [ -s "$conf" ] || echo '{}' >"$conf"
  say "$h: starting a second dockerd on unix://$sock (log: $log)"
  env -i PATH="$BIN:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" HOME=/root \
      LABCTL_SIM_HOOK_LOG="$(hook_log_of "$h")" \
    setsid dockerd --config-file "$conf" -H "unix://$sock" --data-root "$data" --exec-root "$exe" \
      --pidfile "$pidf" --bridge=none --iptables=false --ip-forward=false --ip-masq=false \
      --containerd-namespace "$CONTAINERD_NS-$h" --containerd-plugins-namespace "$CONTAINERD_NS-$h-plugins" \
      </dev/null >>"$log" 2>&1 &
  for _ in $(seq 1 80); do answers "$h" && { say "$h: up (pid $(daemon_pid "$h"))"; return; }; sleep 0.25; done
  tail -20 "$log" >&2 || true
  die "$h: dockerd did not answer on $sock within 20 s"
}

ensure_base_image() {
  local h=$1
  if sim_docker "$h" image inspect "$BASE_IMAGE" >/dev/null 2>&1; then say "$h: $BASE_IMAGE present"; return; fi
  main_docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 \
    || die "$BASE_IMAGE is not in the main daemon either: run \`make docker-lab\` first"
  say "$h: loading $BASE_IMAGE from the main daemon (docker save | load)"
  main_docker save "$BASE_IMAGE" | sim_docker "$h" load -q >/dev/null
}

registry_ok() { python3 - "$REGISTRY_ADDR" <<'PY' >/dev/null 2>&1
import sys, urllib.request
urllib.request.urlopen(f"http://{sys.argv[1]}/v2/", timeout=2)
PY
}

# The proof that matters: a GPU request starts on the sim daemon (the nvidia driver is registered).
check_gpu_request() {
  local h=$1 out
  if ! out=$(sim_docker "$h" run --rm --network host --gpus '"device=0"' "$BASE_IMAGE" \
        sh -c 'echo "$NVIDIA_VISIBLE_DEVICES"' 2>&1); then
    die "$h: a GPU request failed on the sim daemon: $out (if it says 'could not select device driver', the daemon predates $BIN/nvidia-container-runtime-hook: \`scripts/sim-lab.sh stop\` and re-run)"
  fi
  [ "$out" = 0 ] || die "$h: expected NVIDIA_VISIBLE_DEVICES=0 in the container, got '$out'"
  say "$h: --gpus '\"device=0\"' starts, container sees NVIDIA_VISIBLE_DEVICES=0"
}

write_hosts_file() {
  mkdir -p "$(dirname "$HOSTS_FILE")"
  local tmp; tmp=$(mktemp "$HOSTS_FILE.XXXXXX")
  {
    echo "# Written by scripts/sim-lab.sh: the simulated GPU hosts of the test lab (no real GPU behind them)."
    echo "# One second dockerd per host; nvidia-smi is the stand-in reading the host's JSON config."
    echo "hosts:"
    for h in "${HOSTS[@]}"; do
      echo "  $h:"
      echo "    docker: unix://$(sock_of "$h")"
      echo "    nvidia_smi: [\"$BIN/nvidia-smi\", \"--sim-config\", \"$STATE/$h.json\"]"
      echo "    simulated: true"
      # A DGX Spark's GPU shares the host's 128 GB (nvidia-smi says [N/A]): the simulated one says how much.
      [ "$h" = sim-gb10 ] && echo "    unified_memory_gib: 119.6"
    done
    echo "default: ${HOSTS[0]}"
  } >"$tmp"
  mv -f "$tmp" "$HOSTS_FILE"
  say "hosts file: $HOSTS_FILE"
}

cmd_up() {
  [ "$(id -u)" = 0 ] || die "run as root (it starts dockerd)"
  refuse_real_nvidia
  command -v docker >/dev/null || die "docker CLI not found: run \`make docker-lab\` first"
  main_docker info >/dev/null 2>&1 || die "the main Docker daemon does not answer: run \`make docker-lab\` first"
  install_tools
  write_configs
  local h
  for h in "${HOSTS[@]}"; do ensure_daemon "$h"; done
  for h in "${HOSTS[@]}"; do ensure_base_image "$h"; done
  for h in "${HOSTS[@]}"; do check_gpu_request "$h"; done
  if registry_ok; then say "registry $REGISTRY_ADDR answers (both sim daemons pull from it over loopback)"
  else say "warning: registry $REGISTRY_ADDR does not answer: run \`make docker-lab\`"; fi
  write_hosts_file
  say "ready: state under $STATE, sockets under $RUN:"
  for h in "${HOSTS[@]}"; do
    say "  $h  docker=unix://$(sock_of "$h")  nvidia-smi=$BIN/nvidia-smi --sim-config $STATE/$h.json"
  done
}

cmd_status() {
  local h
  for h in "${HOSTS[@]}"; do
    if answers "$h"; then say "$h: running (pid $(daemon_pid "$h" || echo '?'), unix://$(sock_of "$h"))"
    else say "$h: not running"; fi
  done
}

cmd_stop() {
  local h pid
  for h in "${HOSTS[@]}"; do
    if ! pid=$(daemon_pid "$h"); then say "$h: not running"; continue; fi
    is_our_daemon "$h" || die "$h: pid $pid in $(pid_of "$h") is not a sim-lab daemon: left alone"
    say "$h: stopping dockerd pid $pid"
    kill "$pid"
    for _ in $(seq 1 60); do [ -d "/proc/$pid" ] || break; sleep 0.25; done
    # (An if, not `[ … ] && die`: as the loop's last command a false test would fail the whole stop.)
    if [ -d "/proc/$pid" ]; then die "$h: dockerd pid $pid still running after 15 s"; fi
  done
}

cmd_purge() {
  HOSTS=(sim-h100 sim-gb10)  # every daemon whose data is about to go, not only the chosen ones
  cmd_stop
  # A stopped dockerd leaves its network namespace mounted under its exec root (and a killed one its
  # data root's mounts): rm cannot delete a mount point.
  local dir mounts
  for dir in "$STATE" "$RUN"; do
    dir=$(realpath -m "$dir")  # findmnt reports /run, not the /var/run symlink
    mounts=$(findmnt -rn -o TARGET | awk -v d="$dir" '$0 == d || index($0, d "/") == 1' | sort -r)
    if [ -n "$mounts" ]; then say "unmounting ${mounts//$'\n'/ }"; echo "$mounts" | xargs -r umount -l; fi
  done
  say "deleting $STATE, $RUN, $LOGS and $HOSTS_FILE"
  rm -rf "$STATE" "$RUN" "$LOGS" "$HOSTS_FILE"
  say "purged"
}

case ${1:-up} in
  up) cmd_up ;;
  status) cmd_status ;;
  stop) cmd_stop ;;
  purge) cmd_purge ;;
  *) die "usage: $0 [up|status|stop|purge]" ;;
esac

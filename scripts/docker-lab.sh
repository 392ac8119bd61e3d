#!/usr/bin/env bash
# Provision a real Docker lab on a Debian-like host (root): Docker Engine, Compose v2 + buildx
# plugins, a registry on 127.0.0.1:5000 and an offline Python base image. Idempotent: every step
# checks first and says what it does; a host with a working Docker + Compose v2 is left alone.
#   LABCTL_LAB_STATE   /var/lib/labctl-lab  the registry's storage and config, the base image's tarball
#   LABCTL_LAB_LOGS    /var/log             dockerd.log, labctl-registry.log, labctl-debootstrap.log
set -Eeuo pipefail

REGISTRY_ADDR=${LABCTL_REGISTRY_ADDR:-127.0.0.1:5000}
BASE_IMAGE=${LABCTL_BASE_IMAGE:-labctl/base:bookworm}
STATE=${LABCTL_LAB_STATE:-/var/lib/labctl-lab}
LOGS=${LABCTL_LAB_LOGS:-/var/log}
PLUGIN_DIR=/usr/local/lib/docker/cli-plugins

say() { printf 'docker-lab: %s\n' "$*"; }
die() { printf 'docker-lab: error: %s\n' "$*" >&2; exit 1; }
# Any command that fails says so, with where, and where the logs are: never a silent exit.
on_error() {
  local rc=$?
  [ "$BASH_SUBSHELL" = 0 ] || return "$rc"  # the shell that ran the subshell reports it
  printf 'docker-lab: error: exit %s from: %s (%s line %s, in %s); logs: %s\n' \
    "$rc" "$BASH_COMMAND" "$0" "${BASH_LINENO[0]}" "${FUNCNAME[1]:-main}" "$LOGS" >&2
}
trap on_error ERR

need_root() { [ "$(id -u)" = 0 ] || die "run as root (it installs packages and starts dockerd)"; }

apt_updated=""
apt_install() {
  need_root
  command -v apt-get >/dev/null || die "no apt-get: install Docker Engine and Compose v2 by hand, then re-run"
  [ -n "$apt_updated" ] || { say "apt-get update"; apt-get update -qq; apt_updated=1; }
  say "installing: $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

ensure_engine_packages() {
  local missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  command -v docker-registry >/dev/null || missing+=(docker-registry)
  if [ ${#missing[@]} -gt 0 ]; then apt_install "${missing[@]}"; else say "dockerd, debootstrap, docker-registry: present"; fi
}

compose_ok() { docker compose version >/dev/null 2>&1; }
buildx_ok() { docker buildx version >/dev/null 2>&1; }

ensure_compose_plugins() {
  if compose_ok && buildx_ok; then say "compose v2 + buildx: $(docker compose version --short)"; return; fi
  need_root
  # bookworm ships only Compose v1; trixie's docker-compose/docker-buildx are static Go binaries.
  # Fetch them with a private apt config so the host's own sources stay untouched.
  local d; d=$(mktemp -d); mkdir -p "$d/lists/partial" "$d/debs" "$d/x"
  local src=/etc/apt/sources.list.d/debian.sources
  [ -f "$src" ] || die "$src not found: cannot derive a trixie source for Compose v2"
  awk 'BEGIN{RS="";ORS="\n\n"} NR==1' "$src" \
    | sed -e 's/^Suites:.*/Suites: trixie/' -e '/^#/d' > "$d/trixie.sources"
  local o=(-o "Dir::Etc::SourceList=$d/trixie.sources" -o Dir::Etc::SourceParts=/dev/null -o "Dir::State::Lists=$d/lists")
  say "fetching docker-compose and docker-buildx from Debian trixie"
  apt-get "${o[@]}" update -qq
  (cd "$d/debs" && apt-get "${o[@]}" download docker-compose docker-buildx >/dev/null)
  for f in "$d"/debs/*.deb; do dpkg -x "$f" "$d/x"; done
  mkdir -p "$PLUGIN_DIR"
  cp "$d"/x/usr/libexec/docker/cli-plugins/docker-* "$PLUGIN_DIR/"
  rm -rf "$d"
  compose_ok || die "docker compose still not working after install"
  say "compose v2: $(docker compose version --short)"
}

ensure_daemon() {
  if docker info >/dev/null 2>&1; then say "docker daemon: answering"; return; fi
  need_root
  mkdir -p "$LOGS"
  say "starting dockerd --bridge=none --iptables=false (log: $LOGS/dockerd.log)"
  # Tests talk to loopback only: no bridge, containers use host networking.
  nohup dockerd --bridge=none --iptables=false >"$LOGS/dockerd.log" 2>&1 &
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && { say "docker daemon: up"; return; }; sleep 0.5; done
  tail -20 "$LOGS/dockerd.log" >&2 || true
  die "dockerd did not answer within 30 s"
}

registry_ok() { python3 - "$REGISTRY_ADDR" <<'PY' >/dev/null 2>&1
import sys, urllib.request
urllib.request.urlopen(f"http://{sys.argv[1]}/v2/", timeout=2)
PY
}

ensure_registry() {
  if registry_ok; then say "registry: answering on $REGISTRY_ADDR"; return; fi
  need_root
  command -v docker-registry >/dev/null || apt_install docker-registry
  mkdir -p "$STATE/registry" "$LOGS"
  cat > "$STATE/registry.yml" <<YML
version: 0.1
storage: {filesystem: {rootdirectory: $STATE/registry}, delete: {enabled: true}}
http: {addr: $REGISTRY_ADDR}
YML
  say "starting registry on $REGISTRY_ADDR (log: $LOGS/labctl-registry.log)"
  nohup docker-registry serve "$STATE/registry.yml" >"$LOGS/labctl-registry.log" 2>&1 &
  for _ in $(seq 1 40); do registry_ok && { say "registry: up"; return; }; sleep 0.25; done
  tail -20 "$LOGS/labctl-registry.log" >&2 || true
  die "registry did not answer on $REGISTRY_ADDR"
}

ensure_base_image() {
  if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then say "base image $BASE_IMAGE: present"; return; fi
  need_root
  local tarball="$STATE/base-bookworm.tar"
  if [ ! -s "$tarball" ]; then
    command -v debootstrap >/dev/null || apt_install debootstrap
    local root; root=$(mktemp -d)
    mkdir -p "$LOGS"
    say "debootstrap bookworm minbase with python3 (about a minute; log: $LOGS/labctl-debootstrap.log)"
    debootstrap --variant=minbase --include=python3 bookworm "$root" >"$LOGS/labctl-debootstrap.log" 2>&1 \
      || { tail -20 "$LOGS/labctl-debootstrap.log" >&2; die "debootstrap failed"; }
    mkdir -p "$STATE"
    # Two commands, not `tar && mv`: a failing tar in an && list would not stop the script.
    tar -C "$root" -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    rm -rf "$root"
  fi
  say "importing $BASE_IMAGE"
  docker import "$tarball" "$BASE_IMAGE" >/dev/null
}

main() {
  if command -v docker >/dev/null && compose_ok && docker info >/dev/null 2>&1; then
    say "docker + compose v2 already work: leaving the engine alone"
  else
    ensure_engine_packages
    ensure_compose_plugins
    ensure_daemon
  fi
  ensure_registry
  ensure_base_image
  say "ready: docker $(docker version -f '{{.Server.Version}}'), compose $(docker compose version --short), registry $REGISTRY_ADDR, base $BASE_IMAGE"
}

main "$@"

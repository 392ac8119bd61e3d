#!/usr/bin/env bash
# Build labctl's authenticating reverse proxy image (templates/auth-proxy/Dockerfile): Debian 12's nginx,
# pinned by sha256 in templates/auth-proxy/debs.lock, built with no network (the lab daemon has no bridge
# network). The .deb is fetched with `apt-get download` only when missing, so every run after the first is
# offline; the image is rebuilt only when its inputs changed (a label says which it was built from).
# State roots and names:
#   LABCTL_AUTH_PROXY_CACHE   /var/cache/labctl/auth-proxy   context/ is the build context
#   LABCTL_AUTH_PROXY_IMAGE   labctl/auth-proxy:1
#   LABCTL_BASE_IMAGE         labctl/base:bookworm            (from `make docker-lab`)
set -Eeuo pipefail
cd "$(dirname "$0")/.."
DIR=$PWD/templates/auth-proxy
CACHE=${LABCTL_AUTH_PROXY_CACHE:-/var/cache/labctl/auth-proxy}
IMAGE=${LABCTL_AUTH_PROXY_IMAGE:-labctl/auth-proxy:1}
BASE=${LABCTL_BASE_IMAGE:-labctl/base:bookworm}
CONTEXT=$CACHE/context
say() { printf 'auth-proxy-image: %s\n' "$*"; }
die() { printf 'auth-proxy-image: error: %s\n' "$*" >&2; exit 1; }
trap 'printf "auth-proxy-image: error: exit %s from: %s (line %s)\n" "$?" "$BASH_COMMAND" "$LINENO" >&2' ERR
mkdir -p "$CONTEXT"

while read -r file hash; do
  if [ ! -f "$CONTEXT/$file" ]; then
    pkg=${file%%_*} rest=${file#*_}
    say "downloading $file (apt-get download $pkg=${rest%_*})"
    (cd "$CONTEXT" && apt-get download "$pkg=${rest%_*}" >/dev/null 2>&1) \
      || die "apt-get download $pkg=${rest%_*} failed: this needs a Debian 12 host's package sources"
  fi
  [ "$(sha256sum "$CONTEXT/$file" | cut -d' ' -f1)" = "$hash" ] \
    || { rm -f "$CONTEXT/$file"; die "$file does not match the sha256 in templates/auth-proxy/debs.lock (removed; run again)"; }
done < <(grep -v '^#' "$DIR/debs.lock")

inputs=$(cat "$DIR/Dockerfile" "$DIR/debs.lock" "$DIR/labctl-auth-proxy" | sha256sum | cut -c1-16)
current=$(docker image inspect -f '{{index .Config.Labels "org.labctl.inputs"}}' "$IMAGE" 2>/dev/null || true)
if [ "$current" = "$inputs" ]; then
  say "$IMAGE is up to date (inputs $inputs)"
  exit 0
fi
docker image inspect "$BASE" >/dev/null 2>&1 || die "base image $BASE not found: run \`make docker-lab\` first"
cp "$DIR/Dockerfile" "$DIR/labctl-auth-proxy" "$CONTEXT/"
say "building $IMAGE on $BASE with --network none"
DOCKER_BUILDKIT=0 docker build -q --network none --build-arg "BASE=$BASE" --build-arg "INPUTS=$inputs" \
  -t "$IMAGE" "$CONTEXT" >/dev/null || die "building $IMAGE failed"
say "built $IMAGE"

#!/usr/bin/env bash
# Build the harness engine image and push it to the lab registry, so that it has a real digest.
# Uses python:3.12-slim when present locally, else the offline base from `make docker-lab`.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${LABCTL_HARNESS_IMAGE:-127.0.0.1:5000/labctl/harness:dev}
BASE=${LABCTL_HARNESS_BASE:-}
if [ -z "$BASE" ]; then
  if docker image inspect python:3.12-slim >/dev/null 2>&1; then BASE=python:3.12-slim; else BASE=labctl/base:bookworm; fi
fi
say() { printf 'harness-image: %s\n' "$*"; }
say "building $IMAGE on $BASE"
log=$(mktemp)
# The legacy builder needs no buildx and works with the Debian 12 daemon.
DOCKER_BUILDKIT=0 docker build --build-arg "BASE=$BASE" -f engines/harness/Dockerfile -t "$IMAGE" . >"$log" 2>&1 \
  || { cat "$log" >&2; rm -f "$log"; exit 1; }
rm -f "$log"
say "pushing $IMAGE"
docker push -q "$IMAGE" >/dev/null
say "digest: $(docker image inspect -f '{{range .RepoDigests}}{{.}} {{end}}' "$IMAGE")"

#!/usr/bin/env bash
# Build the harness engine image and push it to the lab registry, so that it has a real digest: labctl's
# own build (python -m labctl.run.images.harness, the one `labctl up` runs when the image is missing),
# on $LABCTL_HARNESS_BASE, else python:3.12-slim when present locally, else the offline base from
# `make docker-lab`. Then the engine personas: one image with shims for every engine's real command line,
# and one tiny image per engine version with a CLI contract (engines/ENGINE/cli/VERSION.yaml), pushed as
# 127.0.0.1:5000/labctl/persona-ENGINE:VERSION. Nothing is downloaded; builds are cached (idempotent).
# Its state is the persona builds' log build/harness-image.log in this checkout, remade every run; the
# names it tags and pushes come from
#   LABCTL_HARNESS_IMAGE   127.0.0.1:5000/labctl/harness:dev
#   LABCTL_PERSONA_REPO    127.0.0.1:5000/labctl       (persona-ENGINE:VERSION under it)
#   LABCTL_PERSONA_BASE    labctl/persona-base:dev     (local only, the personas' common layer)
set -Eeuo pipefail
cd "$(dirname "$0")/.."
IMAGE=${LABCTL_HARNESS_IMAGE:-127.0.0.1:5000/labctl/harness:dev}
PERSONA_REPO=${LABCTL_PERSONA_REPO:-127.0.0.1:5000/labctl}
PERSONA_BASE=${LABCTL_PERSONA_BASE:-labctl/persona-base:dev}
PYTHON=${PYTHON:-.venv/bin/python}
LOG=$PWD/build/harness-image.log
say() { printf 'harness-image: %s\n' "$*"; }
die() { printf 'harness-image: error: %s\n' "$*" >&2; exit 1; }
# Any command that fails says so, with where, and where the log is: never a silent exit.
on_error() {
  local rc=$?
  [ "$BASH_SUBSHELL" = 0 ] || return "$rc"  # the shell that ran the subshell reports it
  printf 'harness-image: error: exit %s from: %s (%s line %s); log: %s\n' \
    "$rc" "$BASH_COMMAND" "$0" "${BASH_LINENO[0]}" "$LOG" >&2
}
trap on_error ERR
[ -x "$PYTHON" ] || die "$PYTHON not found (PYTHON names the Python whose labctl builds the image): run \`make venv\` first"
mkdir -p build
: >"$LOG"
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
# The legacy builder needs no buildx and works with the Debian 12 daemon.
build() {
  local tag=${*: -2:1}  # every call is `build … -t TAG CONTEXT`
  DOCKER_BUILDKIT=0 docker build "$@" >>"$LOG" 2>&1 || { tail -30 "$LOG" >&2; die "building $tag failed (log: $LOG)"; }
}
digest() { docker image inspect -f '{{range .RepoDigests}}{{.}} {{end}}' "$1"; }

"$PYTHON" -m labctl.run.images.harness "$IMAGE"
say "digest: $(digest "$IMAGE")"

# Persona context: the contract loader (labctl.catalog.contracts + labctl.errors), the engine folders' files, the
# shims and stand-ins, and PyYAML's pure-Python modules (the base image has no pip).
mkdir -p "$ctx/labctl/catalog" "$ctx/persona/site/yaml"
cp labctl/errors.py "$ctx/labctl/"
cp labctl/catalog/__init__.py labctl/catalog/contracts.py labctl/catalog/sourcefile.py "$ctx/labctl/catalog/"
# Each persona reads its engine's folder: the contracts and engine.yaml (its serve command and metrics route).
for f in engines/*/cli/*.yaml engines/*/engine.yaml; do mkdir -p "$ctx/$(dirname "$f")"; cp "$f" "$ctx/$f"; done
cp -r engines/harness/persona/bin engines/harness/persona/site engines/harness/persona/app "$ctx/persona/"
cp engines/harness/persona/Dockerfile "$ctx/Dockerfile"
yaml_dir=$("$PYTHON" -c 'import os, yaml; print(os.path.dirname(yaml.__file__))')
cp "$yaml_dir"/*.py "$ctx/persona/site/yaml/"
find "$ctx" -name __pycache__ -prune -exec rm -rf {} +
find "$ctx" -exec touch -h -d 2000-01-01 {} +  # content, not copy times, decides the legacy builder's cache
say "building $PERSONA_BASE on $IMAGE"
build --build-arg "HARNESS=$IMAGE" -t "$PERSONA_BASE" "$ctx"

entrypoint() {
  case "$1" in
    vllm) echo '["vllm", "serve"]' ;;
    atlas) echo '["spark"]' ;;
    *) echo '["persona-entrypoint"]' ;;  # runs the command as given (see bin/persona-entrypoint)
  esac
}
for contract in engines/*/cli/*.yaml; do
  engine=$(basename "$(dirname "$(dirname "$contract")")")
  version=$(basename "$contract" .yaml)
  [ "$engine" != vllm-cpu ] || continue  # the real engine runs here (make vllm-cpu-image): no persona
  tag="$PERSONA_REPO/persona-$engine:$version"
  printf 'FROM %s\nENV LABCTL_PERSONA_ENGINE=%s LABCTL_PERSONA_VERSION=%s\nLABEL org.labctl.persona.engine=%s org.labctl.persona.version=%s\nENTRYPOINT %s\n' \
    "$PERSONA_BASE" "$engine" "$version" "$engine" "$version" "$(entrypoint "$engine")" | build -t "$tag" -
  docker push -q "$tag" >/dev/null
  say "persona $engine $version: $(digest "$tag")"
done

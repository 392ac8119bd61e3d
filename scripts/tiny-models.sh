#!/usr/bin/env bash
# Make the tiny test models (a dense Qwen3 and a Qwen3-MoE, random weights, a BPE tokenizer trained on
# scripts/tiny-models/corpus.txt) inside the vllm-cpu image, with no network, so the host needs no ML stack.
# Deterministic: the same image and corpus give the same bytes (SHA256SUMS lists them). Idempotent: the
# models are remade only when the maker, the corpus or the image changed.
#   LABCTL_TINY_MODELS     build/tiny-models in this checkout   one folder per model, SHA256SUMS, .inputs
#   LABCTL_VLLM_CPU_IMAGE  labctl/vllm-cpu:0.32.0               (from `make vllm-cpu-image`)
#   LABCTL_TINY_LOGS       build/ in this checkout              tiny-models.log
set -Eeuo pipefail
cd "$(dirname "$0")/.."
OUT=${LABCTL_TINY_MODELS:-$PWD/build/tiny-models}
IMAGE=${LABCTL_VLLM_CPU_IMAGE:-labctl/vllm-cpu:0.32.0}
LOGS=${LABCTL_TINY_LOGS:-$PWD/build}
LOG=$LOGS/tiny-models.log
SRC=$PWD/scripts/tiny-models
say() { printf 'tiny-models: %s\n' "$*"; }
die() { printf 'tiny-models: error: %s\n' "$*" >&2; exit 1; }
on_error() {
  local rc=$?
  [ "$BASH_SUBSHELL" = 0 ] || return "$rc"
  printf 'tiny-models: error: exit %s from: %s (%s line %s); log: %s\n' "$rc" "$BASH_COMMAND" "$0" "${BASH_LINENO[0]}" "$LOG" >&2
}
trap on_error ERR
mkdir -p "$LOGS"
: >"$LOG"
image_id=$(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null) \
  || die "image $IMAGE not found: run \`make vllm-cpu-image\` first"
inputs=$( (cat "$SRC/make_tiny_models.py" "$SRC/corpus.txt"; echo "$image_id") | sha256sum | cut -c1-16)
if [ -f "$OUT/.inputs" ] && [ "$(cat "$OUT/.inputs")" = "$inputs" ] && (cd "$OUT" && sha256sum --quiet -c SHA256SUMS) 2>>"$LOG"; then
  say "$OUT is up to date (inputs $inputs)"
  exit 0
fi
tmp=$(mktemp -d "$(dirname "$OUT")/.tiny-models.XXXXXX" 2>/dev/null || { mkdir -p "$(dirname "$OUT")"; mktemp -d "$(dirname "$OUT")/.tiny-models.XXXXXX"; })
trap 'rm -rf "$tmp"' EXIT
say "making the tiny models in $IMAGE (log: $LOG)"
docker run --rm --network none --user "$(id -u):$(id -g)" -e HOME=/tmp -e TOKENIZERS_PARALLELISM=false \
  -e PYTHONHASHSEED=0 -v "$SRC:/src:ro" -v "$tmp:/out" --entrypoint python "$IMAGE" \
  /src/make_tiny_models.py /src/corpus.txt /out >>"$LOG" 2>&1 || { tail -20 "$LOG" >&2; die "the model maker failed (log: $LOG)"; }
(cd "$tmp" && find . -type f ! -name SHA256SUMS | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)
echo "$inputs" >"$tmp/.inputs"
rm -rf "$OUT" && mv "$tmp" "$OUT"
say "made $(ls "$OUT" | tr '\n' ' ')in $OUT ($(du -sh "$OUT" | cut -f1))"

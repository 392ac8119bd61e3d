#!/usr/bin/env bash
# make demo-study: studies/harness-demo.yaml on the SIMULATED GPU lab (build/sim-lab: two simulated hosts),
# through labctl's harness engine. Opens nothing: it prints where the report is. Every number is harness-check.
# DEMO_STUDY_HOME (default build/demo-study) keeps the study's state: a second run reuses every finished cell.
# DEMO_STUDY_PORT (default: the study file's) moves the engines' ports.
set -euo pipefail
cd "$(dirname "$0")/.."
HOME_DIR="${DEMO_STUDY_HOME:-build/demo-study}"
LABCTL=(.venv/bin/labctl --lab build/sim-lab --home "$HOME_DIR")
PORT=()
if [ -n "${DEMO_STUDY_PORT:-}" ]; then PORT=(--port "$DEMO_STUDY_PORT"); fi
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

echo "SIMULATED: the GPUs are the test lab's nvidia-smi stand-in and the engine is labctl's harness."
step "labctl study run studies/harness-demo.yaml   (two hosts in parallel, repeats interleaved)"
"${LABCTL[@]}" study run studies/harness-demo.yaml "${PORT[@]}"
step "labctl study status harness-demo"
"${LABCTL[@]}" study status harness-demo
echo
echo "report: $(realpath "$HOME_DIR")/studies/harness-demo/report/index.html  (report.md beside it)"

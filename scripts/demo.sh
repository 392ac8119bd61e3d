#!/usr/bin/env bash
# make demo: the main job on the embedded default engine (the GPU-free harness), end to end.
set -euo pipefail
cd "$(dirname "$0")/.."
LABCTL=.venv/bin/labctl
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "labctl render harness --profile smoke"
$LABCTL render harness --profile smoke

step "labctl up harness --profile smoke   (unpinned: the image is built on this machine)"
summary=$($LABCTL up harness --profile smoke --allow-unpinned --json)
echo "$summary"
run_id=$(.venv/bin/python -c 'import json,sys; print(json.loads(sys.argv[1])["run_id"])' "$summary")
trap '$LABCTL down "$run_id" >/dev/null 2>&1 || true' EXIT

step "one chat completion through the official openai SDK"
.venv/bin/python - "$summary" <<'PY'
import json, sys
from openai import OpenAI
info = json.loads(sys.argv[1])
client = OpenAI(base_url=info["base_url"], api_key="not-needed")
reply = client.chat.completions.create(model=info["model"], messages=[{"role": "user", "content": "Hello, lab!"}], max_tokens=12)
print(f"{info['model']} answered: {reply.choices[0].message.content!r} (usage: {reply.usage.prompt_tokens} prompt + {reply.usage.completion_tokens} completion tokens)")
PY

step "labctl status"
$LABCTL status

step "the record"
$LABCTL show "$run_id"
echo "record: $(.venv/bin/python -c 'import json,sys; print(json.loads(sys.argv[1])["record"])' "$summary")"

step "labctl down $run_id"
$LABCTL down "$run_id"
trap - EXIT

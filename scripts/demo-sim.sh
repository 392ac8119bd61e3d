#!/usr/bin/env bash
# make demo-sim: the seed's own command, `labctl up sglang --profile qwen3-32b`, on the SIMULATED GPU lab
# (build/sim-lab: the SGLang persona on two simulated H100s). Every number here is harness-check.
set -euo pipefail
cd "$(dirname "$0")/.."
LABCTL=".venv/bin/labctl --lab build/sim-lab"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

echo "SIMULATED: the GPUs below are the test lab's nvidia-smi stand-in and the engine is labctl's SGLang persona."
step "labctl --lab build/sim-lab hosts"
$LABCTL hosts

# --no-fetch: the simulated lab has no Hub to fetch Qwen3-32B from, and the persona reads no weights.
step "labctl --lab build/sim-lab up sglang --profile qwen3-32b --no-fetch   (simulated GPU host)"
summary=$($LABCTL up sglang --profile qwen3-32b --no-fetch --json)
echo "$summary"
run_id=$(.venv/bin/python -c 'import json,sys; print(json.loads(sys.argv[1])["run_id"])' "$summary")
trap '$LABCTL down "$run_id" >/dev/null 2>&1 || true' EXIT

step "one chat completion through the official openai SDK"
.venv/bin/python - "$summary" <<'PY'
import json, sys
from openai import OpenAI
info = json.loads(sys.argv[1])
client = OpenAI(base_url=info["base_url"], api_key="not-needed")
reply = client.chat.completions.create(model=info["model"], messages=[{"role": "user", "content": "Hello, lab!"}],
                                       max_tokens=12, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
print(f"{info['model']} answered: {reply.choices[0].message.content!r}  [simulated: {info['environment_label']}]")
PY

step "labctl status"
$LABCTL status

step "labctl down $run_id"
$LABCTL down "$run_id"
trap - EXIT

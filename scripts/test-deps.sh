#!/usr/bin/env bash
# Test-only system packages, idempotent: headless Chromium renders the report page in a test; Debian's
# python3-venv builds the venv a second Unix user runs labctl from (scripts/user-venv.sh).
set -euo pipefail
missing=()
command -v chromium >/dev/null || command -v chromium-browser >/dev/null || missing+=(chromium)
/usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
if [ ${#missing[@]} -eq 0 ]; then
  echo "test-deps: chromium and python3-venv present"; exit 0
fi
[ "$(id -u)" = 0 ] || { echo "test-deps: run as root to install ${missing[*]} (apt-get install ${missing[*]})" >&2; exit 1; }
echo "test-deps: installing ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null

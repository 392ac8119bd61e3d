#!/usr/bin/env bash
# Test-only system packages: headless Chromium renders the report page in a test. Idempotent.
set -euo pipefail
if command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then
  echo "test-deps: chromium present"; exit 0
fi
[ "$(id -u)" = 0 ] || { echo "test-deps: run as root to install chromium (apt-get install chromium)" >&2; exit 1; }
echo "test-deps: installing chromium (headless report check)"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null

#!/usr/bin/env bash
# A venv every user on the host can run (tests that act as a second Unix user): Debian's /usr/bin/python3,
# not the /root one, with labctl and its dependencies installed from this checkout. Cached under
# LABCTL_USER_VENV_CACHE (default /var/cache/labctl/user-venv), keyed on pyproject.toml's hash, so it is
# built once per dependency set. Prints the venv's folder. Idempotent; safe to run concurrently.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cache="${LABCTL_USER_VENV_CACHE:-/var/cache/labctl/user-venv}"
python=/usr/bin/python3
[ -x "$python" ] || { echo "user-venv: $python is missing (apt-get install python3 python3-venv)" >&2; exit 1; }
"$python" -c 'import ensurepip, venv' 2>/dev/null || {
  echo "user-venv: Debian's python3 has no venv module (make test-deps installs python3-venv)" >&2; exit 1; }
key="$(sha256sum "$repo/pyproject.toml" | cut -c1-16)"
venv="$cache/$key"
if [ -x "$venv/bin/python" ] && [ -f "$venv/.installed" ]; then echo "$venv"; exit 0; fi
mkdir -p "$cache"
chmod 755 "$cache" "$(dirname "$cache")"
exec 9>"$cache/.lock"
flock 9
if [ ! -f "$venv/.installed" ]; then
  rm -rf "$venv"  # a build cut short
  "$python" -m venv "$venv" >&2
  # Non-editable: the venv must not point into a checkout that may vanish; tests put the current code first.
  "$venv/bin/pip" install -q "$repo" >&2
  chmod -R a+rX,go-w "$venv"
  touch "$venv/.installed"
fi
echo "$venv"

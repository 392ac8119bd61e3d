#!/usr/bin/env bash
# Test-only system packages, idempotent: headless Chromium renders the report page in a test; Debian's
# python3-venv builds the venv a second Unix user runs labctl from (scripts/user-venv.sh).
#   LABCTL_TEST_DEPS_LOG  /var/log/labctl-test-deps.log  apt's output when it installs something
set -Eeuo pipefail
LOG=${LABCTL_TEST_DEPS_LOG:-/var/log/labctl-test-deps.log}
say() { printf 'test-deps: %s\n' "$*"; }
die() { printf 'test-deps: error: %s\n' "$*" >&2; exit 1; }
# Any command that fails says so, with where, and where the log is: never a silent exit.
on_error() {
  local rc=$?
  [ "$BASH_SUBSHELL" = 0 ] || return "$rc"  # the shell that ran the subshell reports it
  printf 'test-deps: error: exit %s from: %s (%s line %s); log: %s\n' \
    "$rc" "$BASH_COMMAND" "$0" "${BASH_LINENO[0]}" "$LOG" >&2
}
trap on_error ERR
missing=()
command -v chromium >/dev/null || command -v chromium-browser >/dev/null || missing+=(chromium)
/usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
if [ ${#missing[@]} -eq 0 ]; then
  say "chromium and python3-venv present"; exit 0
fi
[ "$(id -u)" = 0 ] || die "run as root to install ${missing[*]} (apt-get install ${missing[*]})"
command -v apt-get >/dev/null || die "no apt-get: install ${missing[*]} by hand"
mkdir -p "$(dirname "$LOG")"
say "installing ${missing[*]} (apt; log $LOG)"
{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } >"$LOG" 2>&1 \
  || { tail -20 "$LOG" >&2; die "apt-get install ${missing[*]} failed (log: $LOG)"; }
say "installed ${missing[*]}"

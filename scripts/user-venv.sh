#!/usr/bin/env bash
# A venv every user on the host can run (tests that act as a second Unix user): Debian's /usr/bin/python3,
# not the /root one, with labctl and its dependencies installed from this checkout. Cached under
# LABCTL_USER_VENV_CACHE (default /var/cache/labctl/user-venv), keyed on pyproject.toml's hash, so it is
# built once per dependency set; the build's output goes to <cache>/<key>.log. Prints the venv's folder.
# Idempotent; safe to run concurrently.
set -Eeuo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cache="${LABCTL_USER_VENV_CACHE:-/var/cache/labctl/user-venv}"
python=/usr/bin/python3
log="(none: nothing was built)"
die() { printf 'user-venv: error: %s\n' "$*" >&2; exit 1; }
# Any command that fails says so, with where, and where the log is: never a silent exit.
on_error() {
  local rc=$?
  [ "$BASH_SUBSHELL" = 0 ] || return "$rc"  # the shell that ran the subshell reports it
  printf 'user-venv: error: exit %s from: %s (%s line %s); log: %s\n' \
    "$rc" "$BASH_COMMAND" "$0" "${BASH_LINENO[0]}" "$log" >&2
}
trap on_error ERR
[ -x "$python" ] || die "$python is missing (apt-get install python3 python3-venv)"
"$python" -c 'import ensurepip, venv' 2>/dev/null \
  || die "Debian's python3 has no venv module (make test-deps installs python3-venv)"
key="$(sha256sum "$repo/pyproject.toml" | cut -c1-16)"
minor="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
packages="lib/python$minor/site-packages"
# The checkout's own venv (make's .venv, stamped after installing this pyproject.toml) holds the same dependencies
# for the same Python minor version: they are copied, not downloaded, unpacked and compiled again (minutes of CPU);
# only labctl itself is installed. Any other checkout gets them from the package index.
populate() {
  local source="$repo/.venv"
  if [ -f "$source/.installed" ] && [ "$source/.installed" -nt "$repo/pyproject.toml" ] && [ -d "$source/$packages" ] \
    && grep -qE "^version(_info)? = $minor\." "$source/pyvenv.cfg"; then
    echo "user-venv: dependencies copied from $source"
    cp -a "$source/$packages/." "$venv/$packages/"
    rm -rf "$venv/$packages/"__editable__* "$venv/$packages/"*labctl-*.dist-info
    "$venv/bin/python" -m pip install -q --no-deps "$repo"
  else
    "$venv/bin/python" -m ensurepip && "$venv/bin/python" -m pip install -q "$repo"
  fi
}
venv="$cache/$key"
if [ -x "$venv/bin/python" ] && [ -f "$venv/.installed" ]; then echo "$venv"; exit 0; fi
mkdir -p "$cache"
# Every user must reach it: add read and search, never take any away (the parent may be /tmp).
chmod a+rx "$cache" "$(dirname "$cache")"
exec 9>"$cache/.lock"
flock 9
if [ ! -f "$venv/.installed" ]; then
  rm -rf "$venv"  # a build cut short
  log="$venv.log"
  printf 'user-venv: building %s (log: %s)\n' "$venv" "$log" >&2
  # Non-editable: the venv must not point into a checkout that may vanish; tests put the current code first.
  { "$python" -m venv --without-pip "$venv" && populate; } >"$log" 2>&1 \
    || { tail -20 "$log" >&2; die "building $venv failed (log: $log)"; }
  chmod -R a+rX,go-w "$venv"
  touch "$venv/.installed"
fi
echo "$venv"

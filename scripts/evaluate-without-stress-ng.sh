#!/usr/bin/env bash
# The README's first command on a machine without stress-ng (a fresh Debian, a
# minimal image): `cargo run --release -p rtmgr -- evaluate --quick` with a PATH
# that holds every program of this PATH but stress-ng (symlinks in a temporary
# directory), then checks of its report: the built-in load engine ran, every
# round and configuration was measured, every loaded configuration has
# throughput for the six built-in load components, and no load is left behind.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "evaluate-without-stress-ng: skip: rtmgr evaluate needs root"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/bin" "$tmp/tmp"
IFS=: read -ra dirs <<< "$PATH"
for d in "${dirs[@]}"; do
  [ -d "$d" ] || continue
  for f in "$d"/*; do
    name=${f##*/}
    # The first of a name on PATH wins, as for the shell.
    [ "$name" = stress-ng ] || [ -e "$tmp/bin/$name" ] || ln -s "$f" "$tmp/bin/$name"
  done
done
if PATH="$tmp/bin" command -v stress-ng >/dev/null; then
  echo "evaluate-without-stress-ng: stress-ng is still on PATH" >&2
  exit 1
fi
PATH="$tmp/bin" TMPDIR="$tmp/tmp" cargo run --release -p rtmgr -- evaluate --quick --out "$tmp/ev"
report="$tmp/ev/report.json"
fail() { echo "evaluate-without-stress-ng: $*" >&2; exit 1; }
grep -q '"schema": "rtmgr.report/2"' "$report" || fail "not a rtmgr.report/2 report"
grep -q '"load_engine": "builtin"' "$report" || fail "the built-in load engine did not run"
grep -q '"partial": false' "$report" || fail "the run was cut short"
grep -q '"rounds_done": 2' "$report" || fail "not every round ran"
for c in int-float write-fsync tcp-loopback futex-mutex file-lock cache-walk; do
  n=$(grep -c "\"component\": \"$c\"" "$report" || true)
  [ "$n" = 4 ] || fail "component $c has throughput in $n of the 4 loaded configurations"
done
[ -z "$(ls -A "$tmp/tmp")" ] || fail "load directories left behind: $(ls "$tmp/tmp")"
if grep -lsz -- "$tmp/tmp/[r]tmgr-load" /proc/[0-9]*/cmdline >/dev/null; then
  fail "a load process outlived evaluate"
fi
echo "evaluate-without-stress-ng: ok (report checked, nothing left behind)"

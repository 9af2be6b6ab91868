#!/usr/bin/env bash
# Errors: one line on stderr naming the file, and a sysexits code (64 usage, 66 no input).
source "$(dirname "${BASH_SOURCE[0]}")/clean_env.sh"  # only the QLOAD_* variables this test sets
set -uo pipefail
qload=$1
expect() {  # expect CODE PATTERN -- command...
  local code=$1 pattern=$2; shift 3
  local out rc
  out=$("$@" 2>&1 >/dev/null); rc=$?
  [ "$rc" -eq "$code" ] || { echo "FAIL: '$*' exited $rc, expected $code: $out"; exit 1; }
  [[ "$out" == *"$pattern"* ]] || { echo "FAIL: '$*' printed '$out', expected '$pattern'"; exit 1; }
  [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || { echo "FAIL: '$*' printed more than one line: $out"; exit 1; }
}
expect 66 "qload: error: not found: open: No such file or directory (file '/nonexistent/qload-file')" -- \
  "$qload" hash /nonexistent/qload-file
expect 64 "--engine=fast: 'fast' is not one of auto" -- "$qload" hash --engine fast /dev/null
expect 64 "QLOAD_IO_DEPTH" -- env QLOAD_IO_DEPTH=zero "$qload" hash /dev/null
expect 64 "" -- "$qload" no-such-command
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
expect 64 "not a regular file" -- "$qload" hash "$dir"
# A recipe that is not Lua (a credentials file): the file, the line and what was expected, never
# its text (issue 45 finding 12: LuaJIT's message ended "near 'admin'").
printf 'user admin\npassword hunter2\n' >"$dir/creds.txt"
expect 64 "creds.txt:1: '=' expected" -- "$qload" load --recipe "$dir/creds.txt" /dev/null
out=$("$qload" load --recipe "$dir/creds.txt" /dev/null 2>&1)
[[ "$out" != *admin* && "$out" != *hunter2* ]] || { echo "FAIL: the recipe's text was echoed: $out"; exit 1; }
echo "errors ok"

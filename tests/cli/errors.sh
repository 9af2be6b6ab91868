#!/usr/bin/env bash
# Errors: one line on stderr naming the file, and a sysexits code (64 usage, 66 no input).
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
echo "errors ok"

#!/usr/bin/env bash
# `qload hash` equals xxhsum -H2 (XXH128) and -H3 (XXH3-64), with both engines, text and JSON.
source "$(dirname "${BASH_SOURCE[0]}")/clean_env.sh"  # only the QLOAD_* variables this test sets
set -euo pipefail
qload=$1 xxhsum=$2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
head -c 3000001 /dev/urandom > "$dir/a.bin"
: > "$dir/empty.bin"
for f in "$dir/a.bin" "$dir/empty.bin"; do
  want128=$("$xxhsum" -H2 "$f" 2>/dev/null | cut -d' ' -f1)
  want64=$("$xxhsum" -H3 "$f" 2>/dev/null | sed 's/.* = //')
  for engine in uring pread; do
    read -r got128 got64 _ < <("$qload" hash --engine "$engine" "$f")
    [ "$got128" = "$want128" ] || { echo "$engine $f: xxh128 $got128 != $want128"; exit 1; }
    [ "$got64" = "$want64" ] || { echo "$engine $f: xxh3 $got64 != $want64"; exit 1; }
  done
  QLOAD_IO=pread "$qload" hash --json "$f" | grep -q "\"xxh3_128\": \"$want128\"" || { echo "json mismatch"; exit 1; }
done
echo "qload hash matches xxhsum"

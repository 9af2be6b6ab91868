#!/usr/bin/env bash
# clang-tidy (the checks in .clang-tidy) over every product source file, with the compile
# commands of BUILD_DIR (the clang 16 checking build: GCC's flags are not clang's). Fails listing
# every finding. About 4 minutes on 2 cores.
# Usage: tests/style/tidy.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$1
command -v run-clang-tidy-16 >/dev/null || { echo "tidy: run-clang-tidy-16 is missing (./setup.sh installs clang-tidy-16)"; exit 1; }
log=$(mktemp); trap 'rm -f "$log"' EXIT
status=0
run-clang-tidy-16 -p "$build" -j "${JOBS:-$(nproc)}" -quiet -clang-tidy-binary clang-tidy-16 \
  "^$PWD/(runtime|io|formats|distributed|scheduler|scripts|session|cli|capi)/.*\.cpp$" > "$log" 2>&1 || status=$?
if grep -qE "(warning|error): " "$log" || [ "$status" -ne 0 ]; then
  grep -E "(warning|error): " "$log" | sort -u
  echo "tidy: clang-tidy found the above (checks in .clang-tidy)"
  exit 1
fi
echo "tidy: no finding in the product sources (.clang-tidy)"

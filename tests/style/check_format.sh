#!/usr/bin/env bash
# Fails listing every tracked C++/CUDA source that clang-format would change.
set -euo pipefail
clang_format=$1 root=$2
cd "$root"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.h')
else
  mapfile -t files < <(find runtime io formats scheduler scripts tests examples bench \
    -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' -o -name '*.h')
fi
"$clang_format" --dry-run --Werror "${files[@]}"
echo "${#files[@]} files formatted"

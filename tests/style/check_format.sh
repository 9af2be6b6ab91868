#!/usr/bin/env bash
# Fails listing every tracked C++/CUDA source that clang-format would change (vendored headers,
# capi/include/dlpack, keep their upstream format).
set -euo pipefail
clang_format=$1 root=$2
cd "$root"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.h' ':!:capi/include/dlpack/*')
else
  mapfile -t files < <(find runtime io formats scheduler scripts session capi cudasim tests examples bench \
    -path capi/include/dlpack -prune -o \( -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' -o -name '*.h' \) -print)
fi
"$clang_format" --dry-run --Werror "${files[@]}"
echo "${#files[@]} files formatted"

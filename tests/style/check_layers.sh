#!/usr/bin/env bash
# Layers depend only downward (docs/architecture.md):
#   runtime <- io <- formats <- distributed <- scheduler <- scripts (recipes) <- session <- clients
# and the clients (the CLI in cli/, the C ABI in capi/) include only the session's and
# the runtime's headers: every operation goes through the session layer, and the lower
# layers' types reach them through its headers; a layer's src/ headers only reach its tests,
# fuzzers and benchmarks, through qload::NAME_internal. Fails listing everything that breaks this.
set -euo pipefail
cd "$1"
declare -A allowed=(
  [runtime]="runtime"
  [io]="runtime io"
  [formats]="runtime io formats"
  [distributed]="runtime io formats distributed"
  [scheduler]="runtime io formats distributed scheduler"
  [scripts]="runtime io formats distributed scheduler scripts"
  [session]="runtime io formats distributed scheduler scripts session"
  [cli]="runtime session"
  [capi]="runtime session"
)
bad=0
for dir in "${!allowed[@]}"; do
  while IFS= read -r file; do
    while IFS= read -r line; do
      layer=$(sed -E 's|.*#include "qload/([a-z_]+)/.*|\1|' <<<"${line#*:}")
      if [[ " ${allowed[$dir]} " != *" $layer "* ]]; then
        echo "$file:${line%%:*}: $dir must not include qload/$layer/ (allowed: ${allowed[$dir]})"
        bad=1
      fi
    done < <(grep -n '#include "qload/[a-z_]*/' "$file" || true)
  done < <(find "$dir" \( -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' -o -name '*.h' \) -print)
done
# A layer's internal target (qload::NAME_internal: its src/ headers) is for its tests, fuzzers
# and benchmarks; no product target links one, and nothing reaches into a src/ by path.
for dir in "${!allowed[@]}" python; do
  while IFS= read -r line; do
    echo "${line}: product code must not use a layer's internals"
    bad=1
  done < <(grep -rn --include=CMakeLists.txt -E '_internal|/src\)' "$dir" | grep -v '^[^:]*:[0-9]*:\s*#' || true)
done
while IFS= read -r line; do
  echo "${line}: reaches into a layer's src/ by path (link qload::NAME_internal instead)"
  bad=1
done < <(grep -rn --include=CMakeLists.txt -E 'PROJECT_SOURCE_DIR\}/[a-z]+/src' tests fuzz bench examples || true)
[ "$bad" -eq 0 ] && echo "layers ok"
exit "$bad"

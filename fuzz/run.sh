#!/usr/bin/env bash
# Runs every libFuzzer target for SECONDS each on its seeds (fuzz/corpus/<target>), with its
# dictionary. New inputs go to a scratch corpus (FUZZ_WORK, default BUILD/fuzz-work), never
# into the tree. A crash, leak or timeout keeps the reproducer in FUZZ_WORK/artifacts, prints
# it (base64) and fails the run after every target had its turn.
#   fuzz/run.sh SECONDS [BUILD_DIR]   (BUILD_DIR: a QLOAD_FUZZ=ON build, default build-asan)
#   FUZZ_TARGETS="recipe lockfile" fuzz/run.sh 600   (some of them; run two at once on two cores)
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${1:?usage: fuzz/run.sh SECONDS [BUILD_DIR]}
build=${2:-build-asan}
work=${FUZZ_WORK:-$build/fuzz-work}
mkdir -p "$work/artifacts"

declare -A dict=([safetensors_header]=json [gguf_header]=gguf [torch_zip]=torch [index_json]=json [model_config]=json [lockfile]=json [recipe]=lua [cli_args]=cli)
failed=()
# Every target fuzz/CMakeLists.txt builds (its fuzz_targets list), unless FUZZ_TARGETS names some.
read -r -a targets <<<"${FUZZ_TARGETS:-$(sed -n 's/^set(fuzz_targets \(.*\))$/\1/p' fuzz/CMakeLists.txt)}"
for target in "${targets[@]}"; do
  bin="$build/fuzz/fuzz_$target"
  [ -x "$bin" ] || { echo "fuzz: $bin is not built (configure with -DQLOAD_FUZZ=ON)" >&2; exit 2; }
  mkdir -p "$work/corpus/$target"
  log="$work/$target.log"
  # -timeout: one input over 10 s is a hang (the recipe sandbox stops at 5 s);
  # -rss_limit_mb: qload bounds its memory, so 2 GB is a bug.
  started=$SECONDS
  seeds=("fuzz/corpus/$target")
  [ "$target" = recipe ] && seeds+=(examples/recipes)  # the example recipes seed it too
  dict_arg=()  # quant_rows and quant_plan read raw bytes, torch_views numbers: no dictionary
  [ -n "${dict[$target]:-}" ] && dict_arg=(-dict="fuzz/dict/${dict[$target]}.dict")
  "$bin" "$work/corpus/$target" "${seeds[@]}" "${dict_arg[@]}" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/$target-" >"$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  echo "fuzz: $target: ${runs:-?} executions in $((SECONDS - started))s, exit $rc"
  if [ "$rc" -ne 0 ]; then
    failed+=("$target")
    grep -m1 -A30 "^==[0-9]*==ERROR\|^SUMMARY\|deadly signal\|timeout after" "$log" >&2 || tail -40 "$log" >&2
    for repro in "$work/artifacts/$target-"*; do
      [ -f "$repro" ] || continue
      echo "fuzz: reproducer $repro (base64):" >&2
      base64 "$repro" | head -c 20000 >&2
      echo >&2
    done
  fi
done
if ((${#failed[@]})); then
  echo "fuzz: FAILED: ${failed[*]} (reproducers in $work/artifacts)" >&2
  exit 1
fi

#!/usr/bin/env bash
# GPU load benchmark (issue 4): synthesize a checkpoint of at least 8 GB, then in one run measure
#   - the copy ceiling: the best pinned host-to-device copy the GPU takes (qload_h2d_bench: one
#     large cudaMemcpyAsync from registered memory; its 16 MiB x 2 streams and pageable numbers
#     are shown for reference),
#   - a plain read of the files: `dd bs=8M of=/dev/null` per file (what the disk or page cache
#     gives with no memory to fill),
#   - `qload load MODEL --device cuda:N --json`, cold (page cache dropped, when root) and warm,
#   - the peers where python3 can import them and torch sees the GPU (bench/gpu_peer.py):
#     safetensors (`safe_open(..., device="cuda:N")`, every tensor of every shard),
#     fastsafetensors (SafeTensorsFileLoader, nogds) and the Run:ai model streamer (to host
#     memory, each tensor then copied to the GPU, as vLLM's runai_streamer format does), timed
#     inside Python after CUDA is initialised, so their numbers leave out interpreter start-up
#     and `import torch`,
# and print GB/s (10^9 bytes of the files per second), ratios and the goals:
#   warm qload >= 0.85x the copy ceiling;  cold qload >= 0.9x min(plain read, copy ceiling);
#   qload faster than each peer (cold vs cold, warm vs warm);
#   qload's host peak RSS <= staging budget + 64 MiB (every qload run).
# Each configuration runs once per round, RUNS rounds, and the best round counts (peak RSS: the
# worst round). A peer that is missing or fails is reported and skipped; the bench goes on.
#
# Usage: bench/gpu_load_bench.sh [BUILD_DIR] [WORK_DIR]   (defaults: build, /tmp/qload-gpu-load-bench)
# Environment:
#   LAYERS HIDDEN INTERMEDIATE VOCAB HEADS KV_HEADS SHARDS  model shape (defaults 32 4096 11008
#                               32000 32 8 4: llama-7B-shaped with 8 KV heads, ~11.9 GB of bf16)
#   MIN_BYTES                   the checkpoint must be at least this big (default 8000000000)
#   DEVICE                      CUDA device index (default 0)
#   RUNS                        rounds (default 3)
#   H2D_SIZE                    bytes per ceiling copy (default 1GiB)
#   PEERS                       peers to try (default "safetensors fastsafetensors runai qload
#                               qload_into", the last two qload's Python package in-process; "" for
#                               none); bench/gpu_wheels.sh fetches the wheels the GPU machine lacks
#   KEEP=1                      keep the checkpoint (a later run with the same shape reuses it)
#   STRICT=1                    exit 2 when a goal is missed (default: misses are reported only)
#   COLD=0                      skip the cold runs (they sync and empty the whole page cache)
#   OUT                         when set, the table is also written to $OUT/gpu_load_bench.txt
#   QLOAD_BENCH_NO_PYTHON=1     act as if python3 were absent (tests the awk/grep fallbacks)
# Exit status: 0 when the ceiling and every qload load were measured; 1 when something that must
# be measured could not be (no GPU, a qload load failed, a bad checkpoint); 2 as above with STRICT.
#
# Needs only bash, coreutils, awk or python3, and the built binaries (the GPU machine has none
# of our Debian libraries); cold runs need root for /proc/sys/vm/drop_caches.
set -uo pipefail
export LC_ALL=C  # '.' as the decimal point for printf and awk

here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
work=${2:-/tmp/qload-gpu-load-bench}
qload="$build/qload"
h2d="$build/bench/qload_h2d_bench"
runs=${RUNS:-3}
device=${DEVICE:-0}
min_bytes=${MIN_BYTES:-8000000000}
peers=${PEERS-safetensors fastsafetensors runai qload qload_into}
model="$work/model"
shape=(--layers "${LAYERS:-32}" --hidden "${HIDDEN:-4096}" --intermediate "${INTERMEDIATE:-11008}"
  --vocab "${VOCAB:-32000}" --heads "${HEADS:-32}" --kv-heads "${KV_HEADS:-8}" --shards "${SHARDS:-4}"
  --dtype bf16)

die() { echo "gpu_load_bench: $*" >&2; exit 1; }
[ -x "$qload" ] || die "no qload binary at $qload (build it, or pass the build dir)"
[[ $runs =~ ^[1-9][0-9]*$ ]] || die "RUNS=$runs: expected a positive integer"
mkdir -p "$work" || die "cannot create $work"

have_py=0
if [ "${QLOAD_BENCH_NO_PYTHON:-0}" != 1 ] && command -v python3 > /dev/null; then have_py=1; fi
if [ "$have_py" = 0 ] && ! command -v awk > /dev/null; then die "needs python3 or awk for arithmetic"; fi

# calc EXPR: a number. EXPR uses only what Python and awk share: numbers, + - * / ( ),
# comparisons inside int(...).
calc() {
  if [ "$have_py" = 1 ]; then python3 -c "print($1)"; else awk "BEGIN { print $1 }"; fi
}
fmt2() { printf '%.2f' "$1"; }
mib() { printf '%.0fMi' "$(calc "$1 / 1048576")"; }

# json_get FILE KEY: a top-level value of a JSON object ("" when absent). The fallback reads
# the pretty-printed output of qload and qload_h2d_bench (top-level keys indented two spaces),
# then any first occurrence in a one-line object.
json_get() {
  if [ "$have_py" = 1 ]; then
    python3 -c 'import json, sys
v = json.load(open(sys.argv[1])).get(sys.argv[2])
print("" if v is None else v)' "$1" "$2" 2> /dev/null
    return
  fi
  local v
  v=$(grep -m1 -E "^  \"$2\": " "$1" | sed -E 's/^  "[^"]*": *//; s/,[[:space:]]*$//; s/^"(.*)"$/\1/')
  if [ -z "$v" ]; then
    v=$(tr -d '\n' < "$1" | grep -oE "\"$2\": *(\"[^\"]*\"|[^,}]*)" | head -1 \
      | sed -E 's/^"[^"]*": *//; s/^"(.*)"$/\1/; s/[[:space:]]+$//')
  fi
  printf '%s\n' "$v"
}

now() { date +%s.%N; }
last_line() { grep -v '^[[:space:]]*$' "$1" | tail -1; }  # the message of a failed command

# --- the checkpoint -------------------------------------------------------------------------
stamp="$work/model.shape"  # the shape the checkpoint in $model was made with
if [ ! -f "$model/config.json" ] || [ "$(cat "$stamp" 2> /dev/null)" != "${shape[*]}" ]; then
  rm -rf "$model" "$stamp"
  echo "== synthesizing the checkpoint into $model: ${shape[*]}"
  "$qload" synth "$model" "${shape[@]}" || { rm -rf "$model"; die "qload synth failed"; }
  echo "${shape[*]}" > "$stamp"
fi
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() { [ "${KEEP:-0}" = 1 ] || rm -rf "$model" "$stamp"; }
trap cleanup EXIT
files=("$model"/*.safetensors)
[ -f "${files[0]}" ] || die "no .safetensors files in $model"
bytes=0
for f in "${files[@]}"; do bytes=$((bytes + $(stat -c %s "$f"))); done
if [ "$bytes" -lt "$min_bytes" ]; then
  die "the checkpoint is $bytes bytes, less than MIN_BYTES=$min_bytes (make the model bigger)"
fi
echo "== checkpoint: $bytes bytes in ${#files[@]} files"

can_drop=0
if [ "$(id -u)" -eq 0 ] && [ -w /proc/sys/vm/drop_caches ]; then can_drop=1; fi
cold_skipped=""
if [ "${COLD:-1}" = 0 ]; then
  cold_skipped="COLD=0"
elif [ "$can_drop" = 0 ]; then
  cold_skipped="not root: cannot drop the page cache"
fi
caches=(cold warm)
if [ -n "$cold_skipped" ]; then
  caches=(warm)
  echo "== cold runs skipped ($cold_skipped)"
fi
prepare() {  # prepare CACHE: empty the page cache, or fill it with the files
  if [ "$1" = cold ]; then
    sync
    echo 3 > /proc/sys/vm/drop_caches
  else
    cat "${files[@]}" > /dev/null
  fi
}

# --- results: per "cache|what", the GB/s of each run, the best, worst RSS, last failure ------
declare -A runs_of best_of rss_of fail_of
staging_bytes=""
record() {  # record KEY SECONDS [RSS]
  local gbps
  gbps=$(calc "$bytes / $2 / 1e9")
  runs_of[$1]="${runs_of[$1]:-}${runs_of[$1]:+ }$(fmt2 "$gbps")"
  if [ -z "${best_of[$1]:-}" ] || [ "$(calc "int($gbps > ${best_of[$1]})")" = 1 ]; then best_of[$1]=$gbps; fi
  if [ -n "${3:-}" ] && { [ -z "${rss_of[$1]:-}" ] || [ "$3" -gt "${rss_of[$1]}" ]; }; then rss_of[$1]=$3; fi
}
record_failure() {  # record_failure KEY MESSAGE
  fail_of[$1]=$2
  echo "   $1: $2"
}

# --- the measurements -----------------------------------------------------------------------
ceiling=""   # best pinned one-copy GB/s
ceiling_note=""
declare -A h2d_best  # json key -> best GB/s
gpu_name=""
measure_ceiling() {
  if [ ! -x "$h2d" ]; then
    ceiling_note="not measured: no $h2d"
    return
  fi
  local rc=0
  "$h2d" --device "$device" --size "${H2D_SIZE:-1GiB}" --json "$work/h2d.json" > "$work/h2d.out" 2> "$work/h2d.err" || rc=$?
  if [ "$rc" -ne 0 ]; then
    ceiling_note="$(last_line "$work/h2d.err") (qload_h2d_bench exit $rc)"
    echo "   copy ceiling: $ceiling_note"
    return
  fi
  cat "$work/h2d.out"
  gpu_name=$(json_get "$work/h2d.json" name)
  local k v
  for k in pinned_gbps pinned_16mib_2streams_gbps pageable_gbps; do
    v=$(json_get "$work/h2d.json" "$k")
    [ -n "$v" ] || continue
    if [ -z "${h2d_best[$k]:-}" ] || [ "$(calc "int($v > ${h2d_best[$k]})")" = 1 ]; then h2d_best[$k]=$v; fi
  done
  ceiling=${h2d_best[pinned_gbps]:-}
}

measure_read() {  # measure_read CACHE
  local f start end
  prepare "$1"
  start=$(now)
  for f in "${files[@]}"; do
    dd if="$f" of=/dev/null bs=8M status=none || { record_failure "$1|read (dd 8M)" "dd failed on $f"; return; }
  done
  end=$(now)
  record "$1|read (dd 8M)" "$(calc "$end - $start")"
}

measure_qload() {  # measure_qload CACHE
  local key="$1|qload cuda:$device" rc=0 seconds rss
  prepare "$1"
  "$qload" load "$model" --device "cuda:$device" --json > "$work/load.json" 2> "$work/load.err" || rc=$?
  if [ "$rc" -ne 0 ]; then
    record_failure "$key" "failed (exit $rc): $(last_line "$work/load.err")"
    return
  fi
  seconds=$(json_get "$work/load.json" seconds)
  rss=$(json_get "$work/load.json" peak_rss_bytes)
  staging_bytes=$(json_get "$work/load.json" staging_budget_bytes)
  if [ -z "$seconds" ] || [ -z "$rss" ] || [ -z "$staging_bytes" ]; then
    record_failure "$key" "no seconds/peak_rss_bytes/staging_budget_bytes in its --json output"
    return
  fi
  record "$key" "$seconds" "$rss"
}

# The peers run in their own python3 process each time (bench/gpu_peer.py): a clean heap, a
# fresh page-cache state for cold runs and an honest peak RSS. Exit 3 = the peer cannot be
# imported or used here.
peer_py="$here/gpu_peer.py"

declare -A peer_ok peer_note  # peer -> 1 when importable with a GPU; what the check said
check_peers() {
  local p rc
  for p in $peers; do
    if [ "$have_py" = 0 ]; then
      peer_note[$p]="not available (no python3)"
    else
      rc=0
      python3 "$peer_py" "$p" "cuda:$device" > /dev/null 2> "$work/peer.err" || rc=$?
      if [ "$rc" -eq 0 ]; then
        peer_ok[$p]=1
        peer_note[$p]="available"
      else
        peer_note[$p]="not available ($(last_line "$work/peer.err"))"
      fi
    fi
    echo "peer $p: ${peer_note[$p]}"
  done
}

measure_peer() {  # measure_peer CACHE PEER
  local key="$1|$2" rc=0
  [ "${peer_ok[$2]:-0}" = 1 ] || return
  prepare "$1"
  python3 "$peer_py" "$2" "cuda:$device" "${files[@]}" > "$work/peer.json" 2> "$work/peer.err" || rc=$?
  if [ "$rc" -ne 0 ]; then
    record_failure "$key" "peer $2 failed (exit $rc): $(last_line "$work/peer.err")"
    return
  fi
  local seconds
  seconds=$(json_get "$work/peer.json" seconds)
  if [ -z "$seconds" ]; then
    record_failure "$key" "peer $2 printed no seconds: $(last_line "$work/peer.json")"
    return
  fi
  record "$key" "$seconds" "$(json_get "$work/peer.json" peak_rss_bytes)"
}

check_peers
rounds_done=0
for ((round = 1; round <= runs; round++)); do
  echo "== round $round of $runs"
  rounds_done=$round
  measure_ceiling
  for cache in "${caches[@]}"; do
    measure_read "$cache"
    measure_qload "$cache"
    for p in $peers; do measure_peer "$cache" "$p"; done
  done
  # Nothing reached the GPU: more rounds would only repeat the same failures.
  if [ -z "$ceiling" ] && [ -z "${best_of[warm|qload cuda:$device]:-}" ]; then
    echo "== nothing ran on cuda:$device in round $round; no more rounds"
    break
  fi
done

# --- the table ------------------------------------------------------------------------------
status=0
missed=0
report() {
  local gb read_gbps lo cache what key g line goal_rss p
  gb=$(calc "$bytes / 1e9")
  echo
  echo "checkpoint: $(fmt2 "$gb") GB in ${#files[@]} files ($model); best of $rounds_done rounds; device cuda:$device${gpu_name:+ ($gpu_name)}"
  if [ -n "$ceiling" ]; then
    echo "copy ceiling (pinned, one ${H2D_SIZE:-1GiB} cudaMemcpyAsync): $(fmt2 "$ceiling") GB/s;" \
      "16 MiB x 2 streams $(fmt2 "${h2d_best[pinned_16mib_2streams_gbps]:-0}"), pageable $(fmt2 "${h2d_best[pageable_gbps]:-0}")"
  else
    echo "copy ceiling: $ceiling_note"
    status=1
  fi
  for p in $peers; do echo "peer $p: ${peer_note[$p]}"; done
  goal_rss=""
  [ -n "$staging_bytes" ] && goal_rss=$((staging_bytes + 64 * 1048576))
  printf '%-5s %-20s %6s %8s %10s  %-20s %9s %9s\n' cache what GB/s "vs ceil" "vs min(r,c)" "all runs GB/s" "peak RSS" "RSS goal"
  for cache in "${caches[@]}"; do
    read_gbps=${best_of[$cache|read (dd 8M)]:-}
    lo=""  # min(plain read, ceiling) for this cache state
    if [ -n "$read_gbps" ] && [ -n "$ceiling" ]; then
      lo=$(calc "($read_gbps < $ceiling) * $read_gbps + ($read_gbps >= $ceiling) * $ceiling")
    fi
    for what in "read (dd 8M)" "qload cuda:$device" $peers; do
      key="$cache|$what"
      g=${best_of[$key]:-}
      if [ -z "$g" ]; then
        if [ -n "${fail_of[$key]:-}" ]; then
          printf '%-5s %-20s %s\n' "$cache" "$what" "${fail_of[$key]}"
        fi
        continue
      fi
      line=$(printf '%-5s %-20s %6.2f %8s %10s  %-20s' "$cache" "$what" "$g" \
        "$([ -n "$ceiling" ] && fmt2 "$(calc "$g / $ceiling")" || echo -)" \
        "$([ -n "$lo" ] && fmt2 "$(calc "$g / $lo")" || echo -)" "${runs_of[$key]}")
      if [ -n "${rss_of[$key]:-}" ]; then
        line+=$(printf ' %9s' "$(mib "${rss_of[$key]}")")
        if [[ $what == qload* ]] && [ -n "$goal_rss" ]; then line+=$(printf ' %9s' "$(mib "$goal_rss")"); fi
      fi
      echo "$line"
      [ -n "${fail_of[$key]:-}" ] && printf '%-5s %-20s also: %s\n' "$cache" "$what" "${fail_of[$key]}"
    done
  done

  echo
  echo "goals:"
  verdict() {  # verdict TEXT CONDITION(calc expr or "") DETAIL
    local v
    if [ -z "$2" ]; then
      v="NOT MEASURED"
      status=1
    elif [ "$(calc "$2")" = 1 ]; then
      v=PASS
    else
      v=MISS
      missed=1
    fi
    printf '  %-48s %-13s %s\n' "$1" "$v" "$3"
  }
  local q warm_q cold_q cold_lo peer_g rss
  q="qload cuda:$device"
  warm_q=${best_of[warm|$q]:-}
  if [ -n "$warm_q" ] && [ -n "$ceiling" ]; then
    verdict "warm >= 0.85x copy ceiling" "int($warm_q >= 0.85 * $ceiling)" \
      "$(fmt2 "$warm_q") / $(fmt2 "$ceiling") GB/s = $(fmt2 "$(calc "$warm_q / $ceiling")")x"
  else
    verdict "warm >= 0.85x copy ceiling" "" "${fail_of[warm|$q]:-$ceiling_note}"
  fi
  if [ -z "$cold_skipped" ]; then
    cold_q=${best_of[cold|$q]:-}
    read_gbps=${best_of[cold|read (dd 8M)]:-}
    cold_lo=""
    if [ -n "$read_gbps" ] && [ -n "$ceiling" ]; then
      cold_lo=$(calc "($read_gbps < $ceiling) * $read_gbps + ($read_gbps >= $ceiling) * $ceiling")
    fi
    if [ -n "$cold_q" ] && [ -n "$cold_lo" ]; then
      verdict "cold >= 0.9x min(plain read, copy ceiling)" "int($cold_q >= 0.9 * $cold_lo)" \
        "$(fmt2 "$cold_q") / $(fmt2 "$cold_lo") GB/s = $(fmt2 "$(calc "$cold_q / $cold_lo")")x"
    else
      verdict "cold >= 0.9x min(plain read, copy ceiling)" "" "${fail_of[cold|$q]:-$ceiling_note}"
    fi
  else
    printf '  %-48s %-13s %s\n' "cold >= 0.9x min(plain read, copy ceiling)" SKIPPED "$cold_skipped"
  fi
  for p in $peers; do
    case $p in qload*) continue ;; esac  # qload's own Python package: shown, not a goal
    if [ "${peer_ok[$p]:-0}" != 1 ]; then
      printf '  %-48s %-13s %s\n' "faster than $p" SKIPPED "peer not available"
      continue
    fi
    for cache in "${caches[@]}"; do
      g=${best_of[$cache|$q]:-}
      peer_g=${best_of[$cache|$p]:-}
      if [ -z "$peer_g" ]; then
        printf '  %-48s %-13s %s\n' "$cache faster than $p" SKIPPED "${fail_of[$cache|$p]:-no run}"
      elif [ -z "$g" ]; then
        verdict "$cache faster than $p" "" "${fail_of[$cache|$q]:-}"
      else
        verdict "$cache faster than $p" "int($g > $peer_g)" "$(fmt2 "$g") vs $(fmt2 "$peer_g") GB/s"
      fi
    done
  done
  rss=""
  for cache in "${caches[@]}"; do
    g=${rss_of[$cache|$q]:-}
    if [ -n "$g" ] && { [ -z "$rss" ] || [ "$g" -gt "$rss" ]; }; then rss=$g; fi
  done
  if [ -n "$rss" ] && [ -n "$goal_rss" ]; then
    verdict "peak RSS <= staging budget + 64 MiB" "int($rss <= $goal_rss)" \
      "worst run $(mib "$rss") vs $(mib "$staging_bytes") + 64Mi = $(mib "$goal_rss")"
  else
    verdict "peak RSS <= staging budget + 64 MiB" "" "no qload load finished"
  fi
  # Every qload load must have worked, in every round.
  for cache in "${caches[@]}"; do [ -z "${fail_of[$cache|$q]:-}" ] || status=1; done
  echo "GB/s = 10^9 bytes of the files per second. qload: its own --json seconds; peers: timed inside" \
    "Python after CUDA init; read: wall time of dd over all files."
}

table="$work/gpu_load_bench.txt"
report > "$table"  # not through a pipe: report sets status and missed
cat "$table"
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT" && cp "$table" "$OUT/gpu_load_bench.txt"
fi
if [ "$status" -ne 0 ]; then
  echo "gpu_load_bench: something that must be measured was not (see above)" >&2
  exit 1
fi
if [ "${STRICT:-0}" = 1 ] && [ "$missed" = 1 ]; then exit 2; fi
exit 0

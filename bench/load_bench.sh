#!/usr/bin/env bash
# Load benchmark (issue 3): synthesize a checkpoint of at least 4 GB, then in one run measure
#   - the baseline the goal is set against: a plain sequential read() of the same files into
#     one buffer that holds them all (bench/plain_read.cpp: what a naive loader does; the
#     buffer comes from the same allocator as qload's arena, so both pay first touch),
#   - for reference, `dd bs=8M of=/dev/null`: the same reads into one reused 8 MiB block, the
#     copy ceiling with no memory to fault in (no loader can keep the weights that way),
#   - `qload load --device cpu` in read mode (with and without per-tensor digests) and, for
#     reference, mmap mode (digests on, so every page is really read),
# cold (page cache dropped, when root) and warm, and print ratios and peak RSS against the
# goal RSS <= arena + staging budget + 64 MiB. Configurations run in turn within each round
# and the best of the rounds is kept: on a VM, memory freed by one process is slow to fault
# in for the next, so single runs scatter by 2-5x.
#
# Usage: bench/load_bench.sh [BUILD_DIR] [WORK_DIR]    (defaults: build, /tmp/qload-load-bench)
# Environment: LAYERS/HIDDEN/INTERMEDIATE/VOCAB (model size; defaults give ~4.4 GB of bf16),
# RUNS (rounds, default 3), KEEP=1 keeps the checkpoint.
set -euo pipefail
build=${1:-build}
work=${2:-/tmp/qload-load-bench}
qload="$build/qload"
runs=${RUNS:-3}
plain="$build/bench/qload_plain_read"
model="$work/model"
mkdir -p "$work"

if [ ! -f "$model/config.json" ]; then
  echo "== synthesizing the checkpoint into $model"
  "$qload" synth "$model" --layers "${LAYERS:-20}" --hidden "${HIDDEN:-3072}" --intermediate "${INTERMEDIATE:-8192}" \
    --vocab "${VOCAB:-32000}" --heads 24 --kv-heads 8 --shards 4 --dtype bf16
fi
files=("$model"/*.safetensors)
bytes=$(cat "${files[@]}" | wc -c)

can_drop=0
if [ "$(id -u)" -eq 0 ] && [ -w /proc/sys/vm/drop_caches ]; then can_drop=1; fi
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
warm() { cat "${files[@]}" > /dev/null; }

seconds_of() {  # seconds_of CMD...: wall seconds of a command whose output is discarded
  local start end
  start=$(date +%s.%N)
  "$@" > /dev/null
  end=$(date +%s.%N)
  python3 -c "print($end - $start)"
}
dd_all() { for f in "${files[@]}"; do dd if="$f" of=/dev/null bs=8M status=none; done; }

results="$work/results.tsv"
: > "$results"
measure() {  # measure CACHE: $runs rounds of every configuration
  local cache=$1 i
  for ((i = 0; i < runs; i++)); do
    prepare "$cache"
    printf '%s\tread() 1 buf\t%s\t0\t0\t0\n' "$cache" \
      "$("$plain" "${files[@]}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["seconds"])')" >> "$results"
    prepare "$cache"
    printf '%s\tdd 8M block\t%s\t0\t0\t0\n' "$cache" "$(seconds_of dd_all)" >> "$results"
    for mode in read read-nodigest mmap; do
      prepare "$cache"
      local flags=()
      # Digests asked for where measured (the default, auto, hashes only for a lock).
      case $mode in read) flags=(--set digests=on) ;; read-nodigest) flags=(--no-digests) ;; mmap) flags=(--mmap --set digests=on) ;; esac
      "$qload" load "$model" "${flags[@]}" --json > "$work/load.json"
      python3 - "$work/load.json" "$cache" "$mode" >> "$results" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]}\tqload {sys.argv[3]}\t{r['seconds']}\t{r['peak_rss_bytes']}\t{r['staging_budget_bytes']}\t{r['tensor_bytes']}")
PY
    done
  done
}
prepare() { if [ "$1" = cold ]; then drop; else warm; fi; }

if [ "$can_drop" -eq 1 ]; then measure cold; else echo "== not root: cold runs skipped (cannot drop the page cache)"; fi
measure warm

python3 - "$results" "$bytes" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
total = int(sys.argv[2])
best, spread = {}, {}
for cache, what, sec, rss, staging, tbytes in rows:
    key = (cache, what)
    spread.setdefault(key, []).append(total / float(sec) / 1e9)
    if key not in best or float(sec) < float(best[key][0]):
        best[key] = (sec, int(rss), int(staging), int(tbytes))
print(f"\ncheckpoint: {total / 1e9:.2f} GB in files; best of {len(spread[next(iter(spread))])} rounds")
print(f"{'cache':<5} {'what':<19} {'GB/s':>6} {'vs read()':>9} {'vs dd':>6} {'all runs GB/s':<20} {'peak RSS':>9} {'RSS goal':>9}")
whats = ("read() 1 buf", "dd 8M block", "qload read", "qload read-nodigest", "qload mmap")
for cache in ("cold", "warm"):
    if (cache, "read() 1 buf") not in best:
        continue
    base = total / float(best[(cache, "read() 1 buf")][0]) / 1e9
    ceiling = total / float(best[(cache, "dd 8M block")][0]) / 1e9
    for what in whats:
        if (cache, what) not in best:
            continue
        sec, rss, staging, tbytes = best[(cache, what)]
        gbps = total / float(sec) / 1e9
        runs = " ".join(f"{g:.2f}" for g in spread[(cache, what)])
        line = f"{cache:<5} {what:<19} {gbps:6.2f} {gbps / base:9.2f} {gbps / ceiling:6.2f} {runs:<20}"
        if what.startswith("qload"):
            # Read mode holds the arena (= tensor bytes) + staging; mmap maps the files instead.
            goal = tbytes + staging + (64 << 20)
            line += f" {rss / 2**20:7.0f}Mi {goal / 2**20:7.0f}Mi {'ok' if rss <= goal else 'OVER'}"
        print(line)
PY
[ "${KEEP:-0}" = 1 ] || rm -rf "$model"

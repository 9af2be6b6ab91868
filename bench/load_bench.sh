#!/usr/bin/env bash
# Load benchmark (issue 3): synthesize a checkpoint of at least 4 GB, then in one run measure
#   - a plain sequential read of the same files into one buffer (dd, 8 MiB blocks), and
#   - `qload load --device cpu` (read mode; and mmap mode for reference),
# cold (page cache dropped, when root) and warm, and print ratios and peak RSS against the
# goal RSS <= arena + staging budget + 64 MiB.
#
# Usage: bench/load_bench.sh [BUILD_DIR] [WORK_DIR]    (defaults: build, /tmp/qload-load-bench)
# Environment: LAYERS/HIDDEN/INTERMEDIATE/VOCAB (model size; defaults give ~4.4 GB of bf16),
# RUNS (best of N per configuration, default 2), KEEP=1 keeps the checkpoint.
set -euo pipefail
build=${1:-build}
work=${2:-/tmp/qload-load-bench}
qload="$build/qload"
runs=${RUNS:-2}
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

plain_read() {  # seconds for reading every file into one 8 MiB buffer
  local start end
  start=$(date +%s.%N)
  for f in "${files[@]}"; do dd if="$f" of=/dev/null bs=8M status=none; done
  end=$(date +%s.%N)
  python3 -c "print($end - $start)"
}

results="$work/results.tsv"
: > "$results"
measure() {  # measure CACHE: best-of-$runs plain read and qload loads
  local cache=$1 i
  for ((i = 0; i < runs; i++)); do
    [ "$cache" = cold ] && drop || warm
    printf '%s\tread()\t%s\t0\t0\t0\n' "$cache" "$(plain_read)" >> "$results"
    for mode in read mmap; do
      [ "$cache" = cold ] && drop || warm
      local flag=""; [ "$mode" = mmap ] && flag="--mmap"
      "$qload" load "$model" $flag --json > "$work/load.json"
      python3 - "$work/load.json" "$cache" "$mode" >> "$results" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]}\tqload {sys.argv[3]}\t{r['seconds']}\t{r['peak_rss_bytes']}\t{r['staging_budget_bytes']}\t{r['bytes']}")
PY
    done
  done
}

if [ "$can_drop" -eq 1 ]; then measure cold; else echo "== not root: cold runs skipped (cannot drop the page cache)"; fi
measure warm

python3 - "$results" "$bytes" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
total = int(sys.argv[2])
best = {}
for cache, what, sec, rss, staging, tbytes in rows:
    key = (cache, what)
    if key not in best or float(sec) < float(best[key][0]):
        best[key] = (sec, int(rss), int(staging), int(tbytes))
print(f"\ncheckpoint: {total / 1e9:.2f} GB in files")
print(f"{'cache':<6} {'what':<12} {'GB/s':>7} {'ratio':>6} {'peak RSS':>10} {'RSS goal':>10}")
for cache in ("cold", "warm"):
    if (cache, "read()") not in best:
        continue
    base = total / float(best[(cache, "read()")][0]) / 1e9
    for what in ("read()", "qload read", "qload mmap"):
        if (cache, what) not in best:
            continue
        sec, rss, staging, tbytes = best[(cache, what)]
        gbps = total / float(sec) / 1e9
        if what == "read()":
            print(f"{cache:<6} {what:<12} {gbps:7.2f} {1.0:6.2f}")
            continue
        # Read mode holds the arena (= tensor bytes) + staging; mmap maps the files instead.
        goal = tbytes + staging + (64 << 20)
        ok = "ok" if rss <= goal else "OVER"
        print(f"{cache:<6} {what:<12} {gbps:7.2f} {gbps / base:6.2f} {rss / 2**20:8.0f}Mi {goal / 2**20:8.0f}Mi {ok}")
PY
[ "${KEEP:-0}" = 1 ] || rm -rf "$model"

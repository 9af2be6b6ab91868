#!/usr/bin/env bash
# Parallel placement benchmark (issue 7): tensor parallel over tp = 1, 2, 4, 8 cpu devices
# (distinct host arenas, the same planning and delivery code as GPUs) against the baseline most
# servers implement: every rank reads the whole checkpoint and keeps its slice, here tp
# concurrent `qload load` processes of the whole checkpoint (each a rank reading everything).
# Two qload variants: one process holding every rank ("qload"), and one process per rank
# meeting over the rendezvous ("processes": WORLD_SIZE=tp, each reading only its rank's bytes).
# Both runs warm (the files are read once before each run), best of RUNS rounds. Printed per tp:
# bytes read from storage (each load's read_bytes), wall seconds of the whole command(s),
# process start included for both, peak RSS (the sum over the baseline's processes), and
# qload / baseline ratios.
#
# Usage: bench/parallel_bench.sh [BUILD_DIR] [WORK_DIR]   (defaults: build, /tmp/qload-parallel-bench)
# Environment: LAYERS HIDDEN INTERMEDIATE VOCAB HEADS KV_HEADS SHARDS (model shape; defaults
# 8 2048 5632 32000 16 4 2, ~1.1 GB of bf16), TPS (default "1 2 4 8"), RUNS (default 3), KEEP=1.
set -euo pipefail
build=${1:-build}
work=${2:-/tmp/qload-parallel-bench}
qload="$build/qload"
runs=${RUNS:-3}
mkdir -p "$work"
model="$work/model"
source "$(dirname "$0")/llama_model.sh"
llama_model "$qload" "$model"
warm() { cat "$model"/*.safetensors > /dev/null; }
echo "== $(du -sh "$model" | cut -f1) checkpoint; $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
results="$work/results.tsv"
: > "$results"
# Appends a results line for a run of tp processes (KIND TP START END): the rank reports in
# $work/rank<R>.json, their read bytes and peak RSS summed.
record_ranks() {
  python3 - "$work" "$2" "$3" "$4" "$1" >> "$results" <<'PY'
import json, sys
d, tp, start, end, kind = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
reports = [json.load(open(f"{d}/rank{r}.json")) for r in range(tp)]
print(kind, tp, end - start, sum(r["read_bytes"] for r in reports), sum(r["peak_rss_bytes"] for r in reports), sep="\t")
PY
}
for ((round = 0; round < runs; round++)); do
  for tp in ${TPS:-1 2 4 8}; do
    devices=$(seq -s, -f "cpu:%g" 0 $((tp - 1)))
    warm
    start=$(date +%s.%N)
    "$qload" load "$model" --devices "$devices" --tp "$tp" --json > "$work/qload.json"
    end=$(date +%s.%N)
    python3 - "$work/qload.json" "$tp" "$start" "$end" >> "$results" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("qload", sys.argv[2], float(sys.argv[4]) - float(sys.argv[3]), r["read_bytes"], r["peak_rss_bytes"], sep="\t")
PY
    if ((tp > 1)); then
      warm
      port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
      start=$(date +%s.%N)
      for ((rank = 0; rank < tp; rank++)); do
        WORLD_SIZE=$tp RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
          "$qload" load "$model" --device cpu --tp "$tp" --json > "$work/rank$rank.json" &
      done
      wait
      end=$(date +%s.%N)
      record_ranks processes "$tp" "$start" "$end"
    fi
    warm
    start=$(date +%s.%N)
    for ((rank = 0; rank < tp; rank++)); do
      "$qload" load "$model" --json > "$work/rank$rank.json" &
    done
    wait
    end=$(date +%s.%N)
    record_ranks baseline "$tp" "$start" "$end"
  done
done
python3 - "$results" <<'PY'
import sys
best = {}
for line in open(sys.argv[1]):
    kind, tp, sec, read, rss = line.split("\t")
    key = (kind, int(tp))
    sec, read, rss = float(sec), int(read), int(rss)
    if key not in best or sec < best[key][0]:
        best[key] = (sec, read, max(rss, best.get(key, (0, 0, 0))[2]))
print(f"\n{'tp':>3} {'loader':>9} {'read GB':>8} {'read ratio':>10} {'seconds':>8} {'time ratio':>10} {'peak RSS':>9} "
      f"{'RSS ratio':>9}")
for tp in sorted({k[1] for k in best}):
    b = best[("baseline", tp)]
    for kind in ("baseline", "qload", "processes"):
        if (kind, tp) not in best:
            continue
        q = best[(kind, tp)]
        print(f"{tp:>3} {kind:>9} {q[1] / 1e9:8.3f} {q[1] / b[1]:10.3f} {q[0]:8.3f} {q[0] / b[0]:10.3f} "
              f"{q[2] / 2**20:7.0f}Mi {q[2] / b[2]:9.3f}")
print("ratios are against the baseline (lower is better); times are the best of the rounds, RSS the worst;")
print("read GB, RSS: the sum over a run's processes")
PY
[ "${KEEP:-0}" = 1 ] || rm -rf "$model"

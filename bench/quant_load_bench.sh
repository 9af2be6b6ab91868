#!/usr/bin/env bash
# Quantized load benchmark (issue 5): end-to-end `qload load --device cpu` of quantized
# synthetic checkpoints against their bf16 twin (same shape, same seed, so the same tensors;
# `qload synth --quant` quantizes only the linear weights, embeddings / norms / lm_head stay
# bf16). For each scheme, in rounds (configurations in turn, best of RUNS kept, warm cache:
# the files are `cat` once before every run):
# DEVICE (default cpu) is where every load goes, e.g. cuda:0 (there, --dequantize decodes on the
# GPU from the packed parts).
#   - bf16:         qload load BF16 --json              (the twin: every weight read as is)
#   - Q keep:       qload load Q --json                 (packed parts placed as stored)
#   - Q deq-bf16:   qload load Q --dequantize bf16 --json  (decoded on load to bf16 weights)
# and print GB/s of output (`placed_bytes` / `seconds` of the JSON report), GB/s of stored
# bytes read (`bytes` / `seconds`), the time and output GB/s relative to the bf16 twin, and
# peak RSS. A scheme whose synthesis or load fails is reported and skipped.
#
# Usage: bench/quant_load_bench.sh [BUILD_DIR] [WORK_DIR]   (defaults: build, /tmp/qload-quant-bench)
# Environment: LAYERS HIDDEN INTERMEDIATE VOCAB HEADS KV_HEADS SHARDS (model shape; defaults
# 8 2048 5632 32000 16 4 2, ~1.1 GB of bf16), SCHEMES (default "gptq4 awq fp8-block ct-pack4",
# any of `qload synth --help`'s --quant names), RUNS (rounds, default 3), KEEP=1 keeps the
# checkpoints.
set -euo pipefail
build=${1:-build}
work=${2:-/tmp/qload-quant-bench}
qload="$build/qload"
runs=${RUNS:-3}
device=${DEVICE:-cpu}
schemes=(${SCHEMES:-gptq4 awq fp8-block ct-pack4})
shape=(--layers "${LAYERS:-8}" --hidden "${HIDDEN:-2048}" --intermediate "${INTERMEDIATE:-5632}"
  --vocab "${VOCAB:-32000}" --heads "${HEADS:-16}" --kv-heads "${KV_HEADS:-4}" --shards "${SHARDS:-2}")
mkdir -p "$work"
echo "== loads on $device; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"

synth() {  # synth NAME [--quant Q]: the checkpoint $work/NAME, made once
  local dir="$work/$1"
  shift
  [ -f "$dir/config.json" ] && return 0
  echo "== synthesizing $dir ($*)"
  if ! "$qload" synth "$dir" "${shape[@]}" --dtype bf16 "$@" > "$work/synth.log" 2>&1; then
    echo "!! synth $* failed: $(tail -n 3 "$work/synth.log")"
    rm -rf "$dir"
    return 1
  fi
}

synth bf16
models=()
for q in "${schemes[@]}"; do
  if synth "$q" --quant "$q"; then models+=("$q"); fi
done

warm() { cat "$work/$1"/*.safetensors > /dev/null; }
declare -A file_bytes
for m in bf16 "${models[@]}"; do file_bytes[$m]=$(cat "$work/$m"/*.safetensors | wc -c); done
results="$work/results.tsv"
: > "$results"
load() {  # load LABEL MODEL [FLAGS...]: one warm load, one line of results.tsv
  local label=$1 model=$2
  shift 2
  warm "$model"
  if ! "$qload" load "$work/$model" --device "$device" "$@" --json > "$work/load.json" 2> "$work/load.err"; then
    echo "!! qload load $model $* failed: $(tail -n 3 "$work/load.err")"
    return 0
  fi
  python3 - "$work/load.json" "$label" "${file_bytes[$model]}" >> "$results" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("\t".join(str(x) for x in (sys.argv[2], r["seconds"], r["placed_bytes"], r["tensor_bytes"], r["peak_rss_bytes"],
                                 r["decoded_tensors"], sys.argv[3])))
PY
}

for ((i = 0; i < runs; i++)); do
  load bf16 bf16
  for q in "${models[@]}"; do
    load "$q keep" "$q"
    load "$q deq-bf16" "$q" --dequantize bf16
  done
done

python3 - "$results" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
best, spread = {}, {}
for label, sec, placed, stored, rss, decoded, files in rows:
    sec = float(sec)
    spread.setdefault(label, []).append(int(placed) / sec / 1e9)
    if label not in best or sec < best[label][0]:
        best[label] = (sec, int(placed), int(stored), int(rss), int(decoded), int(files))
if "bf16" not in best:
    sys.exit("no bf16 twin load succeeded: nothing to compare against")
base_sec, base_placed = best["bf16"][0], best["bf16"][1]
base_gbps = base_placed / base_sec / 1e9
print(f"\nbest of {max(len(v) for v in spread.values())} warm rounds; GB/s = 10^9 B/s; "
      "'out' = placed bytes (the loaded model), 'read' = stored tensor bytes")
print(f"{'load':<20} {'files GB':>8} {'out GB':>7} {'decoded':>7} {'s':>6} {'out GB/s':>8} {'read GB/s':>9} "
      f"{'time/bf16':>9} {'out/bf16':>8} {'peak RSS':>9}  all runs out GB/s")
for label in best:
    sec, placed, stored, rss, decoded, files = best[label]
    gbps = placed / sec / 1e9
    runs = " ".join(f"{g:.2f}" for g in spread[label])
    print(f"{label:<20} {files / 1e9:8.3f} {placed / 1e9:7.3f} {decoded:7d} {sec:6.3f} {gbps:8.2f} "
          f"{stored / sec / 1e9:9.2f} {sec / base_sec:9.2f} {gbps / base_gbps:8.2f} {rss / 2**20:7.0f}Mi  {runs}")
PY
echo "== load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
[ "${KEEP:-0}" = 1 ] || for m in bf16 "${schemes[@]}"; do rm -rf "${work:?}/$m"; done

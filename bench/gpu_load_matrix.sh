#!/usr/bin/env bash
# Where does a warm GPU load spend its time? Loads one synthesized checkpoint (warm page cache)
# under a matrix of settings, cpu vs cuda:0, digests on/off, io_uring vs pread, staging sizes,
# and prints the seconds and GB/s of each from qload's own --json report. One Chrome trace of
# the default cuda:0 load goes to $OUT/trace-cuda.json for a look at the overlap.
# Usage: bench/gpu_load_matrix.sh BUILD_DIR [WORK_DIR]   (LAYERS, default 16: ~6.2 GB)
set -uo pipefail
export LC_ALL=C
qload=${1:-build}/qload
work=${2:-/tmp/qload-load-matrix}
out=${OUT:-$work}
mkdir -p "$work" "$out"
model=$work/model
if [ ! -f "$model/config.json" ]; then
  "$qload" synth "$model" --layers "${LAYERS:-16}" --hidden 4096 --intermediate 11008 --vocab 32000 \
    --heads 32 --kv-heads 8 --shards 4 --dtype bf16 >/dev/null || exit 1
fi
run() {  # run LABEL ARGS...: one warm load; qload's own seconds and each stage's busy seconds
  local label=$1; shift
  cat "$model"/*.safetensors >/dev/null
  if timeout 60 "$qload" load "$model" "$@" --json >"$work/last.json" 2>"$work/last.err"; then
    python3 - "$label" "$work/last.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[2]))
stages = " ".join(f"{s['stage']}={s['busy_seconds']:.2f}" for s in r.get("stages", []))
print(f"{sys.argv[1]:<42} {r['seconds']:6.2f} s {r['tensor_bytes'] / r['seconds'] / 1e9:6.2f} GB/s  "
      f"staging {r['peak_staging_bytes'] >> 20} MiB  rss {r['peak_rss_bytes'] >> 20} MiB  busy: {stages}")
PY
  else
    printf '%-42s FAILED: %s\n' "$label" "$(tail -1 "$work/last.err")"
  fi
}
echo "checkpoint: $(du -sh "$model" | cut -f1); $(nproc) cores"
run "cpu" --device cpu
run "cpu digests=on" --device cpu --set digests=on  # the default, auto, hashes only for a lock
run "cuda:0" --device cuda:0
cp "$work/last.json" "$out/report-cuda.json"
run "cuda:0 digests=on" --device cuda:0 --set digests=on
run "cuda:0 io_engine=pread" --device cuda:0 --set io_engine=pread
run "cuda:0 staging 1GiB slot 64MiB" --device cuda:0 --set staging_bytes=1GiB --set slot_bytes=64MiB
run "cuda:0 copy_lanes=4 reads_in_flight=16" --device cuda:0 --set copy_lanes=4 --set reads_in_flight=16
run "cuda:0 --no-digests pread staging 1GiB" --device cuda:0 --no-digests --set io_engine=pread --set staging_bytes=1GiB --set slot_bytes=64MiB
run "cuda:0 --mmap" --device cuda:0 --mmap
run "cuda:0 trace" --device cuda:0 --trace "$out/trace-cuda.json"

#!/usr/bin/env bash
# GGUF dequantization benchmark: for each block type, a GGUF of 8 random [4096, 4096] weights
# (finite scales) is loaded warm by `qload load --dequantize f32` and dequantized by gguf-py
# (GGUFReader + gguf.quants.dequantize, llama.cpp's own Python package) in the same run; the
# raw-block load (`qload load`, no decode) is the floor, and is set against a load of the same
# blocks written as a safetensors file (U8 tensors of the same bytes) in the same run.
# Best of RUNS (default 3) each, printed as seconds, GB/s of f32 output, gguf-py's time over
# qload's, and the GGUF raw load's time over the safetensors one's. qload's outputs are the same
# bits as gguf-py's (python/tests/gguf), so this compares equal work.
#
# Usage: bench/gguf_dequant_bench.sh [BUILD_DIR] [WORK_DIR]   (defaults: build, /tmp/qload-gguf-bench)
# Environment: GGUF_PYTHON (a python with gguf and numpy; default: the venv python/tests/run_suite.sh
# makes under ~/.cache/qload/gguf-*), TYPES (default "Q4_K Q6_K Q8_0 MXFP4"), RUNS.
set -euo pipefail
build=${1:-build}
work=${2:-/tmp/qload-gguf-bench}
qload="$build/qload"
runs=${RUNS:-3}
types=(${TYPES:-Q4_K Q6_K Q8_0 MXFP4})
python=${GGUF_PYTHON:-$(ls -d "$HOME"/.cache/qload/gguf-*/bin/python 2> /dev/null | head -n 1)}
[ -x "$python" ] || { echo "no python with gguf (set GGUF_PYTHON, or run ctest -R python.gguf once)"; exit 2; }
mkdir -p "$work"
echo "== $(nproc) cores; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"

"$python" - "$work" "${types[@]}" << 'PY'
import os, sys
import numpy as np, gguf
work, types = sys.argv[1], sys.argv[2:]
scale_bytes = {"Q4_K": (0, 2), "Q5_K": (0, 2), "Q2_K": (80, 82), "Q3_K": (108,), "Q6_K": (208,), "Q4_0": (0,),
               "Q8_0": (0,), "IQ4_NL": (0,), "IQ4_XS": (0,)}
rng = np.random.default_rng(0)
for name in types:
    path = os.path.join(work, f"{name}.gguf")
    if os.path.exists(path):
        continue
    qtype = gguf.GGMLQuantizationType[name]
    elems, nbytes = gguf.GGML_QUANT_SIZES[qtype]
    w = gguf.GGUFWriter(path, "llama")
    for layer in range(8):
        blocks = rng.integers(0, 256, size=(4096 * 4096 // elems, nbytes), dtype=np.uint8)
        for at in scale_bytes.get(name, ()):
            blocks[:, at:at + 2] = (rng.normal(size=len(blocks)) * 0.01).astype(np.float16).view(np.uint8).reshape(-1, 2)
        if name == "MXFP4":
            blocks[:, 0] = rng.integers(110, 130, size=len(blocks))
        w.add_tensor(f"blk.{layer}.ffn_up.weight", blocks.reshape(4096, -1), raw_dtype=qtype)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
for name in types:  # the same blocks as U8 tensors of a safetensors file (no decode either way)
    path = os.path.join(work, f"{name}.safetensors")
    if os.path.exists(path):
        continue
    import json, struct
    tensors = [(t.name, np.ascontiguousarray(t.data)) for t in gguf.GGUFReader(os.path.join(work, f"{name}.gguf")).tensors]
    header, at = {}, 0
    for tname, data in tensors:
        header[tname] = {"dtype": "U8", "shape": list(data.shape), "data_offsets": [at, at + data.nbytes]}
        at += data.nbytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for _, data in tensors:
            f.write(data.tobytes())
PY

best() { sort -g | head -n 1; }
qload_seconds() {  # FILE [FLAGS...]: best wall seconds of a warm qload load
  local file=$1
  shift
  for _ in $(seq "$runs"); do
    cat "$file" > /dev/null
    "$qload" load "$file" "$@" --json 2> /dev/null | "$python" -c 'import json,sys; print(json.load(sys.stdin)["seconds"])'
  done | best
}
gguf_py_seconds() {  # FILE: best seconds of gguf-py reading and dequantizing every tensor
  for _ in $(seq "$runs"); do
    cat "$1" > /dev/null
    "$python" - "$1" << 'PY'
import sys, time
import gguf
start = time.perf_counter()
for t in gguf.GGUFReader(sys.argv[1]).tensors:
    gguf.quants.dequantize(t.data, t.tensor_type)
print(time.perf_counter() - start)
PY
  done | best
}

printf '%-7s %12s %12s %10s %14s %10s %14s %12s\n' type raw_load_s st_load_s gguf/st qload_deq_s GB/s_out \
  gguf_py_deq_s gguf_py/qload
for name in "${types[@]}"; do
  file="$work/$name.gguf"
  raw=$(qload_seconds "$file")
  st=$(qload_seconds "$work/$name.safetensors")
  deq=$(qload_seconds "$file" --dequantize f32)
  ref=$(gguf_py_seconds "$file")
  out_gb=$(awk 'BEGIN { print 8 * 4096 * 4096 * 4 / 1e9 }')
  printf '%-7s %12.3f %12.3f %10.2f %14.3f %10.2f %14.3f %12.1f\n' "$name" "$raw" "$st" \
    "$(awk -v g="$raw" -v s="$st" 'BEGIN { print g / s }')" "$deq" "$(awk -v g="$out_gb" -v s="$deq" 'BEGIN { print g / s }')" \
    "$ref" "$(awk -v r="$ref" -v d="$deq" 'BEGIN { print r / d }')"
done

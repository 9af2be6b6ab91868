#!/usr/bin/env bash
# Parallel placement end to end on cpu devices: `qload load --tp 4 --pp 2 --dump` writes one
# safetensors file per device; putting every shard back where `qload plan --json` says it
# came from rebuilds every tensor of the checkpoint exactly, each element covered (kv heads
# replicated, norms on every rank); the load reads the same bytes as a single-device load.
# Quantizing and repacking on load under tp 2 write each device its shard in the new format.
# Usage: parallel.sh QLOAD [cpu|cuda]   (cuda: the same on 8 GPUs, e.g. the simulated ones of a
# QLOAD_CUDA_SIM build with QLOAD_CUDASIM_DEVICES=8; the dumps copy each GPU's bytes back)
source "$(dirname "${BASH_SOURCE[0]}")/clean_env.sh"  # only the QLOAD_* variables this test sets
set -euo pipefail
qload=$1 kind=${2:-cpu}
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
"$qload" synth "$dir/m" --layers 4 --hidden 256 --intermediate 512 --vocab 512 --heads 8 --kv-heads 2 --shards 3 >/dev/null
devices=$kind:0,$kind:1,$kind:2,$kind:3,$kind:4,$kind:5,$kind:6,$kind:7
"$qload" plan "$dir/m" --devices $devices --tp 4 --pp 2 --json > "$dir/plan.json"
"$qload" load "$dir/m" --devices $devices --tp 4 --pp 2 --json --dump "$dir/dump" > "$dir/load.json"
"$qload" load "$dir/m" --json > "$dir/single.json"
python3 - "$dir" "$(dirname "$0")" "$kind" <<'PY'
import json, sys, os
d = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from shards import Rebuilt, read_checkpoint, read_safetensors
source = read_checkpoint(f"{d}/m")
dumps = {}
for name in os.listdir(f"{d}/dump"):
    dumps[name[:-len(".safetensors")]] = read_safetensors(f"{d}/dump/{name}")
plan = json.load(open(f"{d}/plan.json"))
for t in plan["tensors"]:
    name = t["name"]
    dtype, shape, full = source[name]
    rebuilt = Rebuilt(dtype, shape, full)
    assert len(t["shards"]) == 4, (name, len(t["shards"]))
    for sh in t["shards"]:
        assert rebuilt.place(sh, dumps[sh["device"]][name][2]), (name, sh["device"])
    covered = rebuilt.covered
    assert bytes(rebuilt.bytes) == full, f"{name}: shards do not rebuild the tensor"
    assert min(covered) >= 1, f"{name}: an element is in no shard"
    splits = {sh["split"] for sh in t["shards"]}
    if splits <= {"rows", "cols", "halves"}:
        assert max(covered) == 1, f"{name}: split {splits} repeats elements"
load, single = json.load(open(f"{d}/load.json")), json.load(open(f"{d}/single.json"))
assert load["read_bytes"] == single["read_bytes"], (load["read_bytes"], single["read_bytes"])
assert load["tensors"] == 4 * single["tensors"]
print(f"parallel: {len(plan['tensors'])} tensors rebuilt from 8 {sys.argv[3] if len(sys.argv) > 3 else 'cpu'} devices (tp 4 x pp 2); "
      f"read once: {load['read_bytes']} bytes")
PY

# Quantizing and repacking on load under tp 2 from the command line: every device holds its
# shard of each linear weight in the target format (FP8 with per-row scales; GPTQ v2 with a
# perm of the shard's K), and o_proj (row-parallel) has half the columns.
"$qload" load "$dir/m" --devices "$kind:0,$kind:1" --tp 2 --quantize fp8:per-channel --dump "$dir/fp8" >/dev/null
"$qload" synth "$dir/g" --layers 1 --hidden 256 --intermediate 512 --vocab 512 --heads 8 --kv-heads 2 --quant gptq4 >/dev/null
"$qload" load "$dir/g" --devices "$kind:0,$kind:1" --tp 2 --repack --dump "$dir/gptq" >/dev/null
python3 - "$dir" "$(dirname "$0")" "$kind" <<'PY'
import sys
d, kind = sys.argv[1], sys.argv[3]
sys.path.insert(0, sys.argv[2])
from shards import read_safetensors
for dev in (("cpu", "cpu:1") if kind == "cpu" else ("cuda:0", "cuda:1")):
    fp8 = read_safetensors(f"{d}/fp8/{dev}.safetensors")
    dtype, shape, _ = fp8["model.layers.0.self_attn.o_proj.weight"]
    assert dtype == "F8_E4M3" and shape == [256, 128], (dev, dtype, shape)
    assert fp8["model.layers.0.self_attn.o_proj.weight_scale"][1] == [256, 1], dev
    gptq = read_safetensors(f"{d}/gptq/{dev}.safetensors")
    assert gptq["model.layers.0.self_attn.o_proj.perm"][1] == [128], dev  # K 256 split in two
    assert gptq["model.layers.0.mlp.up_proj.perm"][1] == [256], dev       # K whole, N split
print("parallel: quantize and repack on load under tp 2 from the CLI")
PY

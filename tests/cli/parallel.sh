#!/usr/bin/env bash
# Parallel placement end to end on cpu devices: `qload load --tp 4 --pp 2 --dump` writes one
# safetensors file per device; putting every shard back where `qload plan --json` says it
# came from rebuilds every tensor of the checkpoint exactly, each element covered (kv heads
# replicated, norms on every rank); the load reads the same bytes as a single-device load.
# Usage: parallel.sh QLOAD
set -euo pipefail
qload=$1
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
"$qload" synth "$dir/m" --layers 4 --hidden 256 --intermediate 512 --vocab 512 --heads 8 --kv-heads 2 --shards 3 >/dev/null
devices=cpu:0,cpu:1,cpu:2,cpu:3,cpu:4,cpu:5,cpu:6,cpu:7
"$qload" plan "$dir/m" --devices $devices --tp 4 --pp 2 --json > "$dir/plan.json"
"$qload" load "$dir/m" --devices $devices --tp 4 --pp 2 --json --dump "$dir/dump" > "$dir/load.json"
"$qload" load "$dir/m" --json > "$dir/single.json"
python3 - "$dir" "$(dirname "$0")" <<'PY'
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
print(f"parallel: {len(plan['tensors'])} tensors rebuilt from 8 devices (tp 4 x pp 2); read once: {load['read_bytes']} bytes")
PY

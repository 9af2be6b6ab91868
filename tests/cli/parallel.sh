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
python3 - "$dir" <<'PY'
import json, struct, sys, os
d = sys.argv[1]
def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    return {name: (t["dtype"], t["shape"], data[t["data_offsets"][0]:t["data_offsets"][1]]) for name, t in header.items()}
source = {}
for name in sorted(os.listdir(f"{d}/m")):
    if name.endswith(".safetensors"):
        source.update(read_safetensors(f"{d}/m/{name}"))
dumps = {}
for name in os.listdir(f"{d}/dump"):
    dumps[name[:-len(".safetensors")]] = read_safetensors(f"{d}/dump/{name}")
plan = json.load(open(f"{d}/plan.json"))
size = {"BF16": 2, "F16": 2, "F32": 4}
for t in plan["tensors"]:
    name = t["name"]
    dtype, shape, full = source[name]
    e = size[dtype]
    rest = 1
    for x in shape[1:]:
        rest *= x
    rebuilt = bytearray(len(full))
    covered = [0] * (len(full) // e)
    assert len(t["shards"]) == 4, (name, len(t["shards"]))
    for sh in t["shards"]:
        _, sshape, sbytes = dumps[sh["device"]][name]
        c0, c1 = sh["cols"]
        width = c1 - c0
        srow = 0
        for r0, r1 in sh["rows"]:
            for r in range(r0, r1):
                src = sbytes[(srow * width) * e:(srow * width + width) * e]
                rebuilt[(r * rest + c0) * e:(r * rest + c1) * e] = src
                for k in range(r * rest + c0, r * rest + c1):
                    covered[k] += 1
                srow += 1
        assert srow * width * e == len(sbytes), (name, sh["device"])
    assert bytes(rebuilt) == full, f"{name}: shards do not rebuild the tensor"
    assert min(covered) >= 1, f"{name}: an element is in no shard"
    splits = {sh["split"] for sh in t["shards"]}
    if splits <= {"rows", "cols", "halves"}:
        assert max(covered) == 1, f"{name}: split {splits} repeats elements"
load, single = json.load(open(f"{d}/load.json")), json.load(open(f"{d}/single.json"))
assert load["read_bytes"] == single["read_bytes"], (load["read_bytes"], single["read_bytes"])
assert load["tensors"] == 4 * single["tensors"]
print(f"parallel: {len(plan['tensors'])} tensors rebuilt from 8 devices (tp 4 x pp 2); read once: {load['read_bytes']} bytes")
PY

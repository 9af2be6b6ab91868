#!/usr/bin/env bash
# `qload synth`, `inspect` and `hash` on a real checkpoint, checked against an independent
# reference: xxhsum over the whole files, and xxhsum over each tensor's byte range (cut out
# with dd at the offsets `inspect --json` reports).
source "$(dirname "${BASH_SOURCE[0]}")/clean_env.sh"  # only the QLOAD_* variables this test sets
set -euo pipefail
qload=$1 xxhsum=$2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
"$qload" synth "$dir/m" --layers 2 --hidden 64 --intermediate 96 --vocab 77 --heads 4 --kv-heads 2 --shards 3 --dtype f16 --seed 3
"$qload" inspect --json "$dir/m" > "$dir/inspect.json"
"$qload" hash --json "$dir/m" > "$dir/hash.json"
python3 - "$dir" "$xxhsum" <<'PY'
import json, subprocess, sys
d, xxhsum = sys.argv[1], sys.argv[2]
inspect = json.load(open(f"{d}/inspect.json"))
hashes = json.load(open(f"{d}/hash.json"))
assert inspect["schema"] == "qload.inspect/2" and inspect["format"] == "safetensors"
assert len(inspect["files"]) == 3 and inspect["tensor_count"] == 1 + 9 * 2 + 2, inspect["tensor_count"]
files = {f["path"] for f in inspect["files"]}
for f in hashes["files"]:
    want = subprocess.run([xxhsum, "-H2", f["path"]], capture_output=True, text=True, check=True).stdout.split()[0]
    assert f["xxh3_128"] == want, (f, want)
by_name = {t["name"]: t["xxh3_64"] for t in hashes["tensors"]}
assert len(by_name) == inspect["tensor_count"]
for t in inspect["tensors"]:
    assert t["file"] in files, t["file"]
    with open(t["file"], "rb") as fh:
        fh.seek(t["offset"])
        data = fh.read(t["nbytes"])
    want = subprocess.run([xxhsum, "-H3", "-"], input=data, capture_output=True, check=True).stdout.decode()
    want = want.split(" = ")[-1].split()[0] if " = " in want else want.split()[0]
    assert by_name[t["name"]] == want, (t["name"], by_name[t["name"]], want)
print("checkpoint hashes match xxhsum for", len(by_name), "tensors")
PY

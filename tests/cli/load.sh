#!/usr/bin/env bash
# `qload load` end to end: a synthetic checkpoint loaded from a directory and through a
# recipe, with both engines and mmap; the dump re-read by `qload hash` has exactly the
# source's tensor digests; the trace is valid Chrome JSON; errors name the file.
source "$(dirname "${BASH_SOURCE[0]}")/clean_env.sh"  # only the QLOAD_* variables this test sets
set -euo pipefail
qload=$1
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
"$qload" synth "$dir/m" --layers 3 --hidden 128 --intermediate 352 --vocab 300 --heads 4 --kv-heads 2 --shards 2 --seed 11 >/dev/null
"$qload" hash --json "$dir/m" > "$dir/source.json"
cat > "$dir/recipe.lua" <<'LUA'
return qload.recipe { source = "m", devices = "cpu", io = { engine = "pread", queue_depth = 4, chunk = "1MiB", staging = "4MiB" } }
LUA
check() {  # check NAME ARGS...: load, dump, compare digests with the source's
  local name=$1; shift
  "$qload" load "$@" --json --dump "$dir/$name" --trace "$dir/$name.trace.json" > "$dir/$name.json"
  "$qload" hash --json "$dir/$name/cpu.safetensors" > "$dir/$name.hash.json"
  python3 - "$dir" "$name" <<'PY'
import json, sys
d, name = sys.argv[1], sys.argv[2]
report = json.load(open(f"{d}/{name}.json"))
source = {t["name"]: t["xxh3_64"] for t in json.load(open(f"{d}/source.json"))["tensors"]}
dumped = {t["name"]: t["xxh3_64"] for t in json.load(open(f"{d}/{name}.hash.json"))["tensors"]}
assert report["schema"] == "qload.load/2" and report["device"] == "cpu"
assert report["tensors"] == len(source) == 30, report["tensors"]
for key in ("tensor_bytes", "seconds", "gb_per_s", "peak_rss_bytes"):
    assert report[key] > 0, key
assert dumped == source, "dumped tensors differ from the checkpoint"
trace = json.load(open(f"{d}/{name}.trace.json"))
lanes = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
if report["mode"] == "read":
    assert any(l.startswith("read") for l in lanes), lanes
    # Digests are computed in the verify lane: only when asked for (no lock here, so the
    # default, auto, computes none; --no-digests none either).
    assert any(l.startswith("verify") for l in lanes) == (name == "digests"), lanes
print(name, "ok:", report["engine"], report["tensors"], "tensors,", report["tensor_bytes"], "bytes")
PY
}
check uring "$dir/m"
QLOAD_IO=pread check pread "$dir/m"
check mmap "$dir/m" --mmap
check nodigest "$dir/m" --no-digests  # digests off: the same bytes still land
check digests "$dir/m" --set digests=on
check recipe "$dir/recipe.lua"
grep -q '"engine": "pread"' "$dir/recipe.json"  # the recipe's io settings were applied

# Several devices: every tensor lands in exactly one DIR/<device>.safetensors, bytes intact.
"$qload" load "$dir/m" --devices cpu,cpu:1,cpu:2 --placement by-layer --json --dump "$dir/multi" > "$dir/multi.json"
"$qload" hash --json "$dir/multi/cpu.safetensors" "$dir/multi/cpu:1.safetensors" "$dir/multi/cpu:2.safetensors" > "$dir/multi.hash.json"
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
source = {t["name"]: t["xxh3_64"] for t in json.load(open(f"{d}/source.json"))["tensors"]}
tensors = json.load(open(f"{d}/multi.hash.json"))["tensors"]
assert sorted(t["name"] for t in tensors) == sorted(source), "a tensor is missing or duplicated across devices"
assert {t["name"]: t["xxh3_64"] for t in tensors} == source
assert json.load(open(f"{d}/multi.json"))["device"] == "cpu,cpu:1,cpu:2"
print("multi-device ok")
PY

# Dtype conversion on load, round trip: bf16 -> f32 (exact) -> bf16 gives the source bytes back.
"$qload" load "$dir/m" --dtype f32 --json --dump "$dir/f32" > "$dir/f32.json"
"$qload" inspect --json "$dir/f32/cpu.safetensors" | python3 -c '
import json, sys
r = json.load(sys.stdin)
dtypes = {t["dtype"] for t in r["tensors"]}
assert dtypes == {"F32"}, dtypes'
"$qload" load "$dir/f32/cpu.safetensors" --dtype bf16 --dump "$dir/back" > /dev/null
"$qload" hash --json "$dir/back/cpu.safetensors" | python3 -c '
import json, sys
source = {t["name"]: t["xxh3_64"] for t in json.load(open(sys.argv[1]))["tensors"]}
back = {t["name"]: t["xxh3_64"] for t in json.load(sys.stdin)["tensors"]}
assert back == source, "bf16 -> f32 -> bf16 changed bytes"
print("dtype round trip ok")' "$dir/source.json"
grep -q '"converted_tensors": 30' "$dir/f32.json"

# Errors: one line naming the file, sysexits codes.
printf 'garbage' > "$dir/bad.safetensors"
set +e
out=$("$qload" load "$dir/bad.safetensors" 2>&1); rc=$?
set -e
[ "$rc" -eq 65 ] || { echo "corrupt file exited $rc: $out"; exit 1; }
[[ "$out" == *"bad.safetensors"* ]] || { echo "error does not name the file: $out"; exit 1; }
set +e
out=$("$qload" load "$dir/m" --device cuda:0 --dump "$dir/gpu-dump" 2>&1); rc=$?
set -e
if [ "$rc" -eq 0 ]; then
  # A GPU (or the simulated ones of a QLOAD_CUDA_SIM build): its bytes, copied back, are the file's.
  "$qload" hash --json "$dir/gpu-dump/cuda:0.safetensors" > "$dir/gpu.json"
  "$qload" hash --json "$dir/m" > "$dir/cpu.json"
  python3 -c 'import json, sys
a, b = (sorted((t["name"], t["xxh3_64"]) for t in json.load(open(p))["tensors"]) for p in sys.argv[1:])
assert a == b, "the GPU copy differs from the checkpoint"' "$dir/gpu.json" "$dir/cpu.json"
else
  [ "$rc" -eq 69 ] && [[ "$out" == *"cuda:0"* ]] || { echo "cuda device exited $rc: $out"; exit 1; }
fi
set +e
out=$("$qload" load "$dir/m" --dtype int4 2>&1); rc=$?
set -e
[ "$rc" -eq 64 ] || { echo "bad --dtype exited $rc: $out"; exit 1; }
printf 'return qload.recipe { sorce = "m" }\n' > "$dir/typo.lua"
set +e
out=$("$qload" load "$dir/typo.lua" 2>&1); rc=$?
set -e
[ "$rc" -eq 64 ] && [[ "$out" == *"typo.lua:1: unknown key 'sorce'"*"did you mean 'source'"* ]] || { echo "recipe typo: $rc $out"; exit 1; }
# --stream: tensors handed over as they complete; the report says when the first came and each
# tenth of the bytes, in order, within the load (a plain load reports none).
"$qload" load "$dir/m" --stream --json > "$dir/stream.json"
"$qload" load "$dir/m" --stream | grep -q "^streamed: first tensor after "
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
r = json.load(open(f"{d}/stream.json"))
t = r["tenths_seconds"]
assert len(t) == 10 and 0 < r["first_tensor_seconds"] <= t[0] and t == sorted(t) and t[-1] <= r["seconds"], r
PY
"$qload" load "$dir/m" --json | python3 -c 'import json, sys; r = json.load(sys.stdin); assert r["tenths_seconds"] == [] and r["first_tensor_seconds"] == 0, r'
echo "load ok"

#!/usr/bin/env bash
# Quantized checkpoints end to end through the CLI: every `synth --quant` scheme is detected by
# `inspect` (with its scale and zero-point layout), loads packed (keep) and dequantized, and `convert --dequantize` writes the same
# tensors `load --dequantize --dump` produces. Quantize on load round trip: bf16 -> convert
# --quantize (each target) -> load --dequantize f32 stays within the scheme's error bound of
# the bf16 original (checked in Python from the raw safetensors bytes, no numpy needed).
source "$(dirname "${BASH_SOURCE[0]}")/clean_env.sh"  # only the QLOAD_* variables this test sets
set -euo pipefail
qload=$1
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
shape=(--layers 1 --hidden 256 --intermediate 512 --vocab 320 --heads 4 --kv-heads 2 --shards 2 --seed 5)

for scheme in gptq4 gptq3 gptq8 awq fp8-block fp8-channel fp8-tensor ct-pack4 ct-pack4-asym ct-fp8; do
  "$qload" synth "$dir/$scheme" "${shape[@]}" --quant "$scheme" > /dev/null
  "$qload" inspect --json "$dir/$scheme" > "$dir/$scheme.inspect.json"
  python3 - "$dir/$scheme.inspect.json" "$scheme" <<'PY'
import json, sys
q = json.load(open(sys.argv[1]))["quantization"]
scheme = sys.argv[2]
expected = {"gptq4": "gptq", "gptq3": "gptq", "gptq8": "gptq", "awq": "awq-gemm", "fp8-block": "fp8",
            "fp8-channel": "fp8", "fp8-tensor": "fp8", "ct-pack4": "ct-pack-quantized", "ct-pack4-asym": "ct-pack-quantized", "ct-fp8": "fp8"}[scheme]
assert q is not None, "no quantization detected"
names = {t["scheme"] for t in q["logical_tensors"]}
assert len(q["logical_tensors"]) == 7, len(q["logical_tensors"])
assert names == {expected}, names
# The scale and zero-point layout, as synth writes each scheme (group 128, GPTQ v1 zeros).
gptq_zeros = "per-group 128, {}-bit packed along N in I32, stored as z-1 per field (GPTQ v1); symmetric, all 2^(bits-1)"
layout = {"gptq4": ("F16", "per-group 128 (with g_idx)", gptq_zeros.format(4)),
          "gptq3": ("F16", "per-group 128 (with g_idx)", gptq_zeros.format(3)),
          "gptq8": ("F16", "per-group 128 (with g_idx)", gptq_zeros.format(8)),
          "awq": ("F16", "per-group 128", "per-group 128, 4-bit packed along N in I32, AWQ's interleaved order"),
          "fp8-block": ("F32", "block 128x128", "none (symmetric)"),
          "fp8-channel": ("F32", "per-channel", "none (symmetric)"),
          "fp8-tensor": ("F32", "per-tensor", "none (symmetric)"),
          "ct-pack4": ("BF16", "per-group 128", "none (symmetric)"),
          "ct-pack4-asym": ("BF16", "per-group 128", "per-group 128, 4-bit packed along N in I32"),
          "ct-fp8": ("BF16", "per-channel", "none (symmetric)")}[scheme]
for t in q["logical_tensors"]:
    assert (t["scale_dtype"], t["scales"], t["zero_points"]) == layout, (t["name"], t["scale_dtype"], t["scales"], t["zero_points"])
PY
  "$qload" load "$dir/$scheme" --json > "$dir/$scheme.keep.json"
  "$qload" load "$dir/$scheme" --repack --json > "$dir/$scheme.repack.json"
  "$qload" load "$dir/$scheme" --dequantize f32 --json --dump "$dir/$scheme.dq" > "$dir/$scheme.dq.json"
  grep -q '"decoded_tensors": 7' "$dir/$scheme.dq.json"
  "$qload" convert "$dir/$scheme" "$dir/$scheme.conv" --dequantize f32 > /dev/null
  "$qload" hash --json "$dir/$scheme.dq/cpu.safetensors" > "$dir/a.json"
  "$qload" hash --json "$dir/$scheme.conv/model.safetensors" > "$dir/b.json"
  python3 - "$dir/a.json" "$dir/b.json" <<'PY'
import json, sys
a = {t["name"]: t["xxh3_64"] for t in json.load(open(sys.argv[1]))["tensors"]}
b = {t["name"]: t["xxh3_64"] for t in json.load(open(sys.argv[2]))["tensors"]}
assert a == b, "convert and load --dump disagree"
PY
  # The converted checkpoint is plain: no quantization left in its config or tensors.
  "$qload" inspect --json "$dir/$scheme.conv" | python3 -c 'import json,sys; assert json.load(sys.stdin)["quantization"] is None'
  echo "$scheme ok"
done

"$qload" synth "$dir/bf16" "${shape[@]}" > /dev/null
# Odd sizes too: K 130 and 350, not multiples of the 4 int8 values a packed word holds.
"$qload" synth "$dir/bf16-odd" --layers 1 --hidden 130 --intermediate 350 --vocab 64 --heads 2 --kv-heads 1 > /dev/null
for source in bf16 bf16-odd; do
for target in fp8 fp8:per-channel fp8:block int8; do
  out="$dir/q-$source-${target/:/-}"
  "$qload" convert "$dir/$source" "$out" --quantize "$target" > /dev/null
  "$qload" load "$out" --dequantize f32 --dump "$out.dq" > /dev/null
  python3 - "$dir/$source" "$out.dq/cpu.safetensors" "$target" <<'PY'
import glob, json, struct, sys

def read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        raw = data[a:b]
        if t["dtype"] == "F32":
            out[name] = struct.unpack(f"<{len(raw) // 4}f", raw)
        elif t["dtype"] == "BF16":
            out[name] = [struct.unpack("<f", b"\0\0" + raw[i:i + 2])[0] for i in range(0, len(raw), 2)]
    return out

original = {}
for shard in glob.glob(sys.argv[1] + "/*.safetensors"):
    original.update(read(shard))
loaded = read(sys.argv[2])
target = sys.argv[3]
checked = 0
for name, values in loaded.items():
    if not name.endswith("_proj.weight"):
        continue
    ref = original[name]
    amax = max(abs(x) for x in ref)
    for x, y in zip(ref, values):
        if target == "int8":  # |err| <= scale / 2, scale = row amax / 127 <= tensor amax / 127
            bound = amax / 127 / 2 * 1.0001
        else:  # fp8 e4m3: 2^-4 relative, or half the subnormal step of the largest scale
            bound = max(abs(x) / 16, amax / 448 / 1024) * 1.0001
        assert abs(x - y) <= bound, (name, x, y, bound)
    checked += 1
assert checked == 7, checked
print(target, "round trip ok")
PY
done
done
echo "quant ok"

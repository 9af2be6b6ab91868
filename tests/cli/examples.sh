#!/usr/bin/env bash
# Every example recipe (examples/recipes/*.lua) against synthesized models, so examples never
# rot: its plan equals the golden plan in tests/cli/golden/ (same recipe + same files => same
# plan and plan hash), and where its devices exist here it loads and puts the right tensors
# in the right places. Usage: examples.sh QLOAD REPO_ROOT
# After an intended change of plans: UPDATE_GOLDEN=1 tests/cli/examples.sh build/qload .
source "$(dirname "${BASH_SOURCE[0]}")/clean_env.sh"  # only the QLOAD_* variables this test sets
set -euo pipefail
qload=$(realpath "$1")
root=$(realpath "$2")
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
# The recipes name ../../build/tiny-*: recreate that layout in the scratch folder.
mkdir -p "$dir/examples" "$dir/build"
cp -r "$root/examples/recipes" "$dir/examples/"
"$qload" synth "$dir/build/tiny-llama" >/dev/null
"$qload" synth "$dir/build/tiny-gptq" --intermediate 768 --quant gptq4 >/dev/null
cd "$dir"

golden="$root/tests/cli/golden"
for recipe in examples/recipes/*.lua; do
  name=$(basename "$recipe" .lua)
  "$qload" plan "$recipe" --json > "$dir/$name.plan.json"
  "$qload" plan "$recipe" --json > "$dir/$name.plan2.json"
  cmp -s "$dir/$name.plan.json" "$dir/$name.plan2.json" || { echo "$name: two plans of the same recipe differ"; exit 1; }
  if [ "${UPDATE_GOLDEN:-0}" = 1 ]; then
    cp "$dir/$name.plan.json" "$golden/$name.plan.json"
    echo "$name: golden plan written"
  elif ! diff -u "$golden/$name.plan.json" "$dir/$name.plan.json" > "$dir/$name.diff"; then
    head -40 "$dir/$name.diff"
    echo "$name: the plan differs from tests/cli/golden/$name.plan.json (UPDATE_GOLDEN=1 if intended)"
    exit 1
  fi
done

load() {  # load NAME: load the example, dump per device, print the dump's tensors as JSON lines
  "$qload" load "examples/recipes/$1.lua" --json --dump "$dir/$1.dump" > "$dir/$1.load.json"
}
tensors() {  # tensors NAME DEVICE: "name dtype" per line of that device's dump
  python3 - "$dir/$1.dump/$2.safetensors" <<'PY'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
for name, t in sorted(header.items()):
    if name != "__metadata__":
        print(name, t["dtype"])
PY
}

load tiny
[ "$(tensors tiny cpu | wc -l)" -gt 10 ] || { echo "tiny: too few tensors"; exit 1; }

load fp8_on_load
t=$(tensors fp8_on_load cpu)
grep -q "^model.layers.0.self_attn.q_proj.weight F8_E4M3$" <<<"$t" || { echo "fp8_on_load: q_proj not fp8"; exit 1; }
grep -q "^model.layers.0.self_attn.q_proj.weight_scale_inv F32$" <<<"$t" || { echo "fp8_on_load: no block scale"; exit 1; }
grep -q "^model.layers.1.mlp.down_proj.weight F8_E4M3$" <<<"$t" || { echo "fp8_on_load: mlp not fp8"; exit 1; }
grep -q "^model.embed_tokens.weight BF16$" <<<"$t" || { echo "fp8_on_load: embeddings changed"; exit 1; }
grep -q "^lm_head.weight BF16$" <<<"$t" || { echo "fp8_on_load: lm_head changed"; exit 1; }

load gptq_keep
t=$(tensors gptq_keep cpu)
grep -q "^model.layers.0.self_attn.o_proj.weight BF16$" <<<"$t" || { echo "gptq_keep: o_proj not dequantized"; exit 1; }
! grep -q "^model.layers.0.self_attn.o_proj.qweight" <<<"$t" || { echo "gptq_keep: o_proj parts kept"; exit 1; }
grep -q "^model.layers.0.self_attn.q_proj.qweight I32$" <<<"$t" || { echo "gptq_keep: q_proj not kept packed"; exit 1; }
grep -q "^model.layers.0.mlp.down_proj.qzeros I32$" <<<"$t" || { echo "gptq_keep: down_proj missing"; exit 1; }
python3 - "$dir/gptq_keep.load.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
# 2 layers: an o_proj dequantized and a down_proj repacked in each.
assert r["decoded_tensors"] >= 4, r
PY

for staged in pipeline split_by_hook; do
  load "$staged"
  first=$(tensors "$staged" cpu)
  second=$(tensors "$staged" cpu:1)
  grep -q "^model.embed_tokens.weight " <<<"$first" || { echo "$staged: embeddings not on the first stage"; exit 1; }
  grep -q "^model.layers.0.mlp.up_proj.weight " <<<"$first" || { echo "$staged: layer 0 not on the first stage"; exit 1; }
  grep -q "^model.layers.1.mlp.up_proj.weight " <<<"$second" || { echo "$staged: layer 1 not on the second stage"; exit 1; }
  grep -q "^lm_head.weight " <<<"$second" || { echo "$staged: lm_head not on the last stage"; exit 1; }
  ! grep -q "layers.1" <<<"$first" || { echo "$staged: layer 1 on the first stage"; exit 1; }
done
grep -q "^lm_head.weight F32$" <<<"$(tensors split_by_hook cpu:1)" || { echo "split_by_hook: dtype not applied"; exit 1; }

load tensor_parallel
python3 - "$dir/tensor_parallel.dump" <<'PY'
import json, struct, sys
def header(device):
    with open(f"{sys.argv[1]}/{device}.safetensors", "rb") as f:
        return json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
ranks = {d: header(d) for d in ("cpu", "cpu:1", "cpu:2", "cpu:3")}
# Stage 0 (cpu, cpu:1) holds layer 0 and the embeddings, stage 1 (cpu:2, cpu:3) layer 1 and lm_head.
q = "model.layers.0.self_attn.q_proj.weight"
assert ranks["cpu"][q]["shape"] == ranks["cpu:1"][q]["shape"] == [128, 256], ranks["cpu"][q]
assert q not in ranks["cpu:2"]
down = "model.layers.1.mlp.down_proj.weight"
assert ranks["cpu:2"][down]["shape"] == [256, 344], ranks["cpu:2"][down]  # columns split
assert ranks["cpu:3"]["lm_head.weight"]["shape"] == [1024, 256]             # the rule: replicated
assert ranks["cpu"]["model.embed_tokens.weight"]["shape"] == [512, 256]     # vocabulary rows split
print("tensor_parallel: shards on the right ranks and stages")
PY

# The GPU example loads where a GPU is visible; elsewhere it fails cleanly, naming the device.
set +e
out=$("$qload" load examples/recipes/gpu_bf16.lua 2>&1)
rc=$?
set -e
gpus=$("$qload" version --json | python3 -c 'import json, sys; print(len(json.load(sys.stdin)["cuda"]["devices"]))')
if [ "$gpus" -eq 0 ]; then
  [ "$rc" -eq 69 ] && [[ "$out" == *"cuda:0"* ]] || { echo "gpu_bf16 without a GPU: rc $rc: $out"; exit 1; }
  echo "gpu_bf16: no GPU here, refused cleanly (exit 69, names cuda:0)"
else
  [ "$rc" -eq 0 ] || { echo "gpu_bf16 on a GPU: rc $rc: $out"; exit 1; }
fi
echo "examples: every recipe plans as its golden plan; every CPU example loads as it says"

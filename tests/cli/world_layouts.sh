#!/usr/bin/env bash
# Every layout over real processes equals the same layout in one process: for plain bf16 and
# for packed quantized splits (GPTQ, AWQ, block FP8 kept quantized), each of tp 2, pp 2, dp 2
# (2 processes), tp 4 and tp 2 x pp 2 (4 processes of 1 device) and tp 2 x pp 2 (2 processes
# of 2 devices) is loaded by a world of processes, each reading its own bytes, then sharing
# reads (what a rank reads for the others reaches them through Gloo). Each rank's dump of each of its devices must be byte for byte the
# one-process load's dump of the same device of the layout. With shared reads, the world reads
# every tensor byte from storage exactly once (one node), and each rank's report says what
# reached it from the others.
# Usage: world_layouts.sh QLOAD
source "$(dirname "${BASH_SOURCE[0]}")/clean_env.sh"  # only the QLOAD_* variables this test sets
set -euo pipefail
qload=$1
source "$(dirname "$0")/world_common.sh"

# world SIZE TAG ARGS...: `qload load ARGS --dump $dir/TAG --json` as every rank of a world of
# SIZE; rank R's report in $dir/TAG.R.json. Fails naming the rank that failed.
world() {
  local size=$1 tag=$2
  shift 2
  MASTER_PORT=$(free_port)
  export MASTER_PORT
  pids=()
  for ((r = 0; r < size; r++)); do
    WORLD_SIZE=$size RANK=$r LOCAL_RANK=$r LOCAL_WORLD_SIZE=$size \
      "$qload" load "$@" --dump "$dir/$tag" --json >"$dir/$tag.$r.json" 2>"$dir/$tag.$r.err" &
    pids+=($!)
  done
  local r=0
  for p in "${pids[@]}"; do
    wait "$p" || { echo "$tag: rank $r failed"; cat "$dir/$tag.$r.err"; exit 1; }
    r=$((r + 1))
  done
  pids=()
}

# same_as_single TAG SINGLE SIZE PER_PROCESS: rank R's device d is the layout's device R*PER+d,
# as the one-process load dumped it into SINGLE.
same_as_single() {
  local tag=$1 single=$2 size=$3 per=$4
  for ((r = 0; r < size; r++)); do
    for ((d = 0; d < per; d++)); do
      local g=$((r * per + d)) local_name=cpu single_name=cpu
      ((d == 0)) || local_name=cpu:$d
      ((g == 0)) || single_name=cpu:$g
      cmp -s "$dir/$tag/rank$r.$local_name.safetensors" "$single/$single_name.safetensors" ||
        { echo "$tag: rank $r's $local_name differs from the one-process load's $single_name"; exit 1; }
    done
  done
}

# PROCESSES DEVICES_PER_PROCESS SHARED FLAGS: SHARED says whether some process holds bytes
# another reads (replicas, norms replicated over tensor ranks); pipeline stages alone, or a
# process holding a stage's every tensor rank, share nothing.
layouts=(
  "2 1 yes --tp 2"
  "2 1 no --pp 2"
  "2 1 yes --dp 2"
  "4 1 yes --tp 4"
  "4 1 yes --tp 2 --pp 2"
  "2 2 no --tp 2 --pp 2"
)
worlds=0
for quant in none gptq4 awq fp8-block; do
  model=$dir/$quant
  if [[ $quant == none ]]; then
    "$qload" synth "$model" --layers 2 --hidden 512 --intermediate 1024 --vocab 512 --heads 4 --kv-heads 2 >/dev/null
  else
    "$qload" synth "$model" --layers 2 --hidden 512 --intermediate 1024 --vocab 512 --heads 4 --kv-heads 2 \
      --quant "$quant" >/dev/null
  fi
  for layout in "${layouts[@]}"; do
    read -r size per shared flags <<<"$layout"
    # shellcheck disable=SC2206
    args=($flags)
    devices=cpu:0
    for ((d = 1; d < size * per; d++)); do devices+=,cpu:$d; done
    local_devices=cpu:0
    ((per == 1)) || local_devices=cpu:0,cpu:1
    tag=$quant${flags// /}
    tag=${tag//--/_}
    "$qload" load "$model" "${args[@]}" --devices "$devices" --dump "$dir/$tag.single" >/dev/null
    world "$size" "$tag" "$model" "${args[@]}" --devices "$local_devices"
    same_as_single "$tag" "$dir/$tag.single" "$size" "$per"
    world "$size" "$tag.shared" "$model" "${args[@]}" --devices "$local_devices" --share-reads
    same_as_single "$tag.shared" "$dir/$tag.single" "$size" "$per"
    python3 - "$dir" "$tag" "$size" "$shared" <<'PY'
import json, sys
d, tag, size, shared = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "yes"
reports = [json.load(open(f"{d}/{tag}.shared.{r}.json")) for r in range(size)]
world = reports[0]["world"]
# One node: the world read each stored tensor byte once between its ranks.
assert len(world["nodes"]) == 1, world
node = world["nodes"][0]
assert node["ranks"] == size and node["tensor_read_bytes"] == world["checkpoint_tensor_bytes"], (tag, world)
received = [r["shared_received_bytes"] for r in reports]
assert [rank["received_bytes"] for rank in world["ranks"]] == received, (world, received)
assert (sum(received) > 0) == shared, (tag, received)
PY
    worlds=$((worlds + 2))
  done
done
echo "$worlds worlds of 2 and 4 processes: every rank's devices equal the one-process load's, shared reads read each tensor byte once"

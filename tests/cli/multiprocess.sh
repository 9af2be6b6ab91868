#!/usr/bin/env bash
# Multi-process loads end to end, as torchrun would start them: WORLD_SIZE processes on this
# machine, each with RANK, LOCAL_RANK, MASTER_ADDR and MASTER_PORT, meet over TCP.
#  1. tp 4 x pp 2 over 4 processes of 2 cpu devices: the dumps of all ranks, put back where
#     each rank's `qload plan --json` says, rebuild every tensor exactly; each rank reads less
#     than the checkpoint, and rank 0 reports the world's totals.
#  2. Ranks that planned different layouts both refuse before reading, naming the rank.
#     A rank that cannot plan (a missing checkpoint) stops the others at once.
#  3. A locked load where one rank's copy of the checkpoint has a flipped byte: that rank
#     fails naming the tensor, and the other fails because it did.
#  4. Two replicas sharing reads (--share-reads) each dump the whole checkpoint, having read
#     it once between them.
#  5. tp 4 x pp 2 over 4 processes sharing reads: the dumps rebuild the checkpoint, read once
#     between the ranks. `qload lock` refuses to run as one rank.
# With `cuda` (a simulator build: each process its own simulated GPU), instead: 4 onto the
# GPUs, the shared tensors broadcast over the simulated NCCL between the processes; then an
# NCCL failure, and a hang, in one process end both with errors naming the rank and the
# broadcast (the hang at QLOAD_NCCL_TIMEOUT).
# Usage: multiprocess.sh QLOAD [cpu|cuda]
source "$(dirname "${BASH_SOURCE[0]}")/clean_env.sh"  # only the QLOAD_* variables this test sets
set -euo pipefail
qload=$1
source "$(dirname "$0")/world_common.sh"
"$qload" synth "$dir/m" --layers 4 --hidden 256 --intermediate 512 --vocab 512 --heads 8 --kv-heads 2 --shards 2 >/dev/null

# Runs `$3 RANK` (a function) as every rank of a world of $1, writing rank R's stdout to
# $dir/$2.R.out, its stderr to $dir/$2.R.err and its exit code to $dir/$2.R.rc.
run_world() {
  local size=$1 tag=$2 command=$3
  MASTER_PORT=$(free_port)
  export MASTER_PORT
  pids=()
  for ((r = 0; r < size; r++)); do
    (
      set +e
      WORLD_SIZE=$size RANK=$r LOCAL_RANK=$r LOCAL_WORLD_SIZE=$size "$command" "$r" >"$dir/$tag.$r.out" 2>"$dir/$tag.$r.err"
      echo $? >"$dir/$tag.$r.rc"
    ) &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  pids=()
}
expect_rc() {  # TAG RANK CODE: the rank exited with CODE (or any failure for "fail")
  local rc
  rc=$(cat "$dir/$1.$2.rc")
  if [[ $3 == fail ]] && [[ $rc != 0 ]]; then return; fi
  [[ $rc == "$3" ]] || { echo "$1 rank $2 exited $rc, expected $3"; cat "$dir/$1.$2.err"; exit 1; }
}
expect_err() {  # TAG RANK TEXT: the rank's stderr says TEXT
  grep -qF -- "$3" "$dir/$1.$2.err" || { echo "$1 rank $2 does not say: $3"; cat "$dir/$1.$2.err"; exit 1; }
}

if [[ ${2:-cpu} == cuda ]]; then
  gpu_rank() { "$qload" load "$dir/m" --dp 2 --share-reads --devices cuda:0 --json --dump "$dir/gpu"; }
  run_world 2 gpu gpu_rank
  for r in 0 1; do expect_rc gpu $r 0; done
  python3 - "$dir" "$(dirname "$0")" <<'PY'
import json, sys
d = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from shards import assert_whole_copy, read_checkpoint
source = read_checkpoint(f"{d}/m")
for r in range(2):
    assert_whole_copy(f"{d}/gpu/rank{r}.cuda:0.safetensors", source, f"rank {r}")
    report = json.load(open(f"{d}/gpu.{r}.out"))
    assert report["shared_received_bytes"] > 0, (r, report)
print("shared reads onto GPUs: 2 processes, each GPU holds the whole checkpoint, half of it broadcast over NCCL")
PY
  # Rank 1's broadcast fails (the simulator's injected fault), or hangs.
  failing_rank() { if [[ $1 == 1 ]]; then QLOAD_CUDASIM_FAULTS=nccl_error:1 gpu_rank; else gpu_rank; fi; }
  hanging_rank() { if [[ $1 == 1 ]]; then QLOAD_CUDASIM_FAULTS=nccl_hang:1 gpu_rank; else gpu_rank; fi; }
  run_world 2 nccl_error failing_rank
  export QLOAD_NCCL_TIMEOUT=2
  run_world 2 nccl_hang hanging_rank
  unset QLOAD_NCCL_TIMEOUT
  for tag in nccl_error nccl_hang; do
    for r in 0 1; do expect_rc $tag $r fail; expect_err $tag $r "rank $r: ncclBroadcast of"; done
  done
  expect_err nccl_error 1 "injected failure"
  expect_err nccl_hang 1 "not done after 2000 ms (the nccl_timeout setting)"
  echo "NCCL failures: a failed and a hung broadcast each end both processes with errors"
  exit 0
fi

# 1. The dumps of 4 ranks rebuild the checkpoint.
plan_rank() { "$qload" plan "$dir/m" --devices cpu:0,cpu:1 --tp 4 --pp 2 --json; }
load_rank() { "$qload" load "$dir/m" --devices cpu:0,cpu:1 --tp 4 --pp 2 --json --dump "$dir/dump"; }
run_world 4 plan plan_rank
run_world 4 load load_rank
for r in 0 1 2 3; do expect_rc plan $r 0; expect_rc load $r 0; done
"$qload" load "$dir/m" --json >"$dir/single.json"
python3 - "$dir" "$(dirname "$0")" <<'PY'
import json, sys
d = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from shards import read_checkpoint, rebuild_from_ranks
source = read_checkpoint(f"{d}/m")
single = json.load(open(f"{d}/single.json"))
reports = [json.load(open(f"{d}/load.{r}.out")) for r in range(4)]
ranks = rebuild_from_ranks(f"{d}/m", [json.load(open(f"{d}/plan.{r}.out")) for r in range(4)], f"{d}/dump")
for r, (devices, held) in enumerate(ranks):
    assert devices == ["cpu", "cpu:1"], (r, devices)
    rep = reports[r]
    assert rep["rank"] == r and rep["world_size"] == 4, rep
    assert rep["tensors"] == held, (r, rep["tensors"], held)
    # Each rank holds one pipeline stage's tp shards of two ranks: it reads far less than all.
    assert rep["read_bytes"] < single["read_bytes"] * 3 // 4, (r, rep["read_bytes"], single["read_bytes"])
world = reports[0]["world"]
assert world["read_bytes"] == sum(rep["read_bytes"] for rep in reports), world
assert world["tensor_bytes"] >= single["tensor_bytes"], (world, single["tensor_bytes"])
print(f"4 ranks rebuilt {len(source)} tensors; world read {world['read_bytes']} bytes, one process {single['read_bytes']}")
PY

# 2. Ranks that planned different layouts both refuse before reading (nothing is dumped).
differ_rank() {
  if (($1 == 0)); then "$qload" load "$dir/m" --tp 2 --dump "$dir/differ"; else "$qload" load "$dir/m" --dp 2 --dump "$dir/differ"; fi
}
run_world 2 differ differ_rank
for r in 0 1; do
  expect_rc differ $r fail
  expect_err differ $r "rank 1 planned a different load from rank 0 (its layout differs): rank 0 has tp 2 x pp 1 x dp 1"
done
[[ ! -e $dir/differ ]]

# A rank that cannot even plan its load (its checkpoint is missing) stops the other at once.
missing_rank() {
  local m=$dir/m
  (($1 == 1)) && m=$dir/missing
  "$qload" load "$m" --tp 2
}
started=$(date +%s)
run_world 2 missing missing_rank
expect_rc missing 1 fail
expect_rc missing 0 fail
expect_err missing 0 "rank 1 could not prepare its load, so this rank stops"
(($(date +%s) - started < 30)) || { echo "rank 0 waited for the rendezvous timeout"; exit 1; }

# 3. A locked load; rank 1's copy of the checkpoint has a flipped byte in the first row of
# layer 0's q_proj, which only rank 0's shard holds: rank 1 still reads it whole and fails
# naming it, and rank 0 fails because rank 1 did.
"$qload" lock "$dir/m" -o "$dir/m.lock" >/dev/null
cp -r "$dir/m" "$dir/m2"
python3 - "$dir/m2" <<'PY'
import json, os, struct, sys
d = sys.argv[1]
for name in sorted(os.listdir(d)):
    if not name.endswith(".safetensors"):
        continue
    path = os.path.join(d, name)
    with open(path, "r+b") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        t = header.get("model.layers.0.self_attn.q_proj.weight")
        if t is None:
            continue
        at = 8 + n + t["data_offsets"][0] + 2
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x40]))
        sys.exit(0)
sys.exit("q_proj not found")
PY
locked_rank() {
  local m=$dir/m
  (($1 == 1)) && m=$dir/m2
  "$qload" load "$m" --tp 2 --locked "$dir/m.lock"
}
run_world 2 locked locked_rank
expect_rc locked 1 fail
expect_err locked 1 "model.layers.0.self_attn.q_proj.weight"
expect_err locked 1 "expected"
expect_rc locked 0 fail
expect_err locked 0 "rank 1 failed, so this rank's load is dropped"
# With both copies intact the locked load passes on both ranks.
locked_ok() { "$qload" load "$dir/m" --tp 2 --locked "$dir/m.lock"; }
run_world 2 locked_ok locked_ok
for r in 0 1; do expect_rc locked_ok $r 0; done
# 4. Two data-parallel replicas sharing reads: each rank's dump is the whole checkpoint, and
# between them they read its tensor bytes once.
shared_rank() { "$qload" load "$dir/m" --dp 2 --share-reads --json --dump "$dir/shared"; }
run_world 2 shared shared_rank
for r in 0 1; do expect_rc shared $r 0; done
python3 - "$dir" "$(dirname "$0")" <<'PY'
import json, sys
d = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from shards import assert_whole_copy, read_checkpoint
source = read_checkpoint(f"{d}/m")
single = json.load(open(f"{d}/single.json"))
total = 0
for r in range(2):
    assert_whole_copy(f"{d}/shared/rank{r}.cpu.safetensors", source, f"rank {r}")
    report = json.load(open(f"{d}/shared.{r}.out"))
    assert 0 < report["tensor_bytes"] < single["tensor_bytes"], (r, report["tensor_bytes"])
    assert report["shared_received_bytes"] > 0, (r, report)
    total += report["tensor_bytes"]
assert total == single["tensor_bytes"], (total, single["tensor_bytes"])
print(f"shared reads: 2 replicas whole, {total} tensor bytes read between them")
PY
# 4b. share_cached auto (the default; these tests set always): a checkpoint the page cache holds
# on every rank is read by each replica itself, nothing sent; once dropped from the page cache,
# the same load shares its reads again.
auto_rank() { QLOAD_SHARE_CACHED=auto "$qload" load "$dir/m" --dp 2 --share-reads --json; }
cat "$dir"/m/*.safetensors >/dev/null
run_world 2 auto_warm auto_rank
for r in 0 1; do expect_rc auto_warm $r 0; done
python3 - "$dir/m" <<'PY'
import glob, os, sys
for path in glob.glob(sys.argv[1] + "/*.safetensors"):  # written back, then dropped
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
PY
# Whether the page cache let go of them (tmpfs, for one, keeps its pages): bytes still held.
held=$(fincore --bytes --noheadings --output RES "$dir"/m/*.safetensors 2>/dev/null | awk '{s += $1} END {print s + 0}')
run_world 2 auto_cold auto_rank
for r in 0 1; do expect_rc auto_cold $r 0; done
python3 - "$dir" "${held:-1}" <<'PY'
import json, sys
d = sys.argv[1]
single = json.load(open(f"{d}/single.json"))
for r in range(2):
    warm = json.load(open(f"{d}/auto_warm.{r}.out"))
    assert warm["shared_received_bytes"] == 0 and warm["tensor_bytes"] == single["tensor_bytes"], (r, warm)
cold = [json.load(open(f"{d}/auto_cold.{r}.out")) for r in range(2)]
received = sum(c["shared_received_bytes"] for c in cold)
if int(sys.argv[2]) == 0:  # dropped: shared again
    assert all(c["shared_received_bytes"] > 0 for c in cold), cold
    print(f"share_cached auto: warm, each replica read it all itself; cold, {received} bytes sent between them")
else:
    print(f"share_cached auto: warm, each replica read it all itself; cold not exercised ({sys.argv[2]} bytes "
          "kept in the page cache after POSIX_FADV_DONTNEED)")
PY
# The same from a recipe: its devices are each rank's share of the layout.
cat >"$dir/shared.lua" <<'LUA'
return qload.recipe { source = "m", devices = { "cpu" }, parallel = { data = 2, share_reads = true } }
LUA
recipe_rank() { "$qload" load "$dir/shared.lua" --json; }
run_world 2 recipe recipe_rank
for r in 0 1; do expect_rc recipe $r 0; done
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
single = json.load(open(f"{d}/single.json"))
read = [json.load(open(f"{d}/recipe.{r}.out"))["tensor_bytes"] for r in range(2)]
assert sum(read) == single["tensor_bytes"] and min(read) > 0, (read, single["tensor_bytes"])
PY
# 5. Tensor and pipeline parallel over 4 processes sharing reads (each tensor read by one of
# the ranks holding it, the others' shards relayed): the dumps rebuild the checkpoint as in 1,
# and between them the ranks read its tensor bytes once.
relay_rank() { "$qload" load "$dir/m" --devices cpu:0,cpu:1 --tp 4 --pp 2 --share-reads --json --dump "$dir/relay"; }
run_world 4 relay relay_rank
for r in 0 1 2 3; do expect_rc relay $r 0; done
python3 - "$dir" "$(dirname "$0")" <<'PY'
import json, sys
d = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from shards import rebuild_from_ranks
single = json.load(open(f"{d}/single.json"))
# The same placement as without shared reads: the plans of 1.
rebuild_from_ranks(f"{d}/m", [json.load(open(f"{d}/plan.{r}.out")) for r in range(4)], f"{d}/relay")
total = 0
for r in range(4):
    report = json.load(open(f"{d}/relay.{r}.out"))
    total += report["tensor_bytes"]
    # Each rank's shards of the tensors others read came through Gloo.
    assert report["shared_received_bytes"] > 0, (r, report)
assert total == single["tensor_bytes"], (total, single["tensor_bytes"])
print(f"relayed shared reads: tp 4 x pp 2 over 4 ranks rebuilt the checkpoint, {total} tensor bytes read once")
PY
# qload lock refuses to run as one rank.
if WORLD_SIZE=2 RANK=0 "$qload" lock "$dir/m" -o "$dir/x.lock" 2>"$dir/lock.err"; then exit 1; fi
grep -qF "single-process lock" "$dir/lock.err"
echo "multi-process loads: rebuild, disagreement and failure propagation ok"

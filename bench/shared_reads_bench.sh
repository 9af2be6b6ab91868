#!/usr/bin/env bash
# Shared reads between processes (issues 7 and 20): N processes (one cpu device each,
# WORLD_SIZE=N, meeting over the rendezvous) load a data-parallel replica (dp:N) or a
# tensor-parallel shard (tp:N) each, either reading what they need themselves ("independent": a
# replica reads everything, a shard its byte ranges) or with --share-reads ("shared": each tensor
# read by one process, which sends the others' copies through Gloo while the load goes on; with
# share_cached auto, the default, a checkpoint every rank's page cache holds is read by each rank
# from there instead; "forced", warm only: QLOAD_SHARE_CACHED=always, shared anyway). Also, in
# the same run: one process loading the whole checkpoint alone ("single"), and the transfer
# engine's bandwidth (qload_dist_bench: Gloo, every rank sending its part to every other at
# once, as a shared load does), so that each shared load is printed beside its bound: single +
# the most bytes any rank received when the reads were shared / that bandwidth (issue 20's speed
# target). Warm: the files are in the page cache. Cold: evicted before each run with
# posix_fadvise(DONTNEED) (dd iflag=nocache; no root needed), so reads hit the disk. Printed per
# layout and cache: bytes read (summed over the processes; warm, from the page cache), wall
# seconds of the whole run, peak RSS (summed), and ratios to independent loads. Best of RUNS.
#
# Usage: bench/shared_reads_bench.sh [BUILD_DIR] [WORK_DIR]   (defaults: build, /tmp/qload-shared-bench)
# Environment: LAYERS HIDDEN INTERMEDIATE VOCAB HEADS KV_HEADS (model shape; defaults as
# bench/parallel_bench.sh, ~1 GB of bf16), LAYOUTS (default "dp:2 dp:4 tp:2 tp:4"), RUNS
# (default 2), KEEP=1.
set -euo pipefail
build=${1:-build}
work=${2:-/tmp/qload-shared-bench}
qload="$build/qload"
runs=${RUNS:-2}
mkdir -p "$work"
model="$work/model"
source "$(dirname "$0")/llama_model.sh"
llama_model "$qload" "$model"
warm() { cat "$model"/*.safetensors >/dev/null; }
cold() { for f in "$model"/*.safetensors; do dd if="$f" iflag=nocache count=0 status=none; done; }
echo "== $(du -sh "$model" | cut -f1) checkpoint; $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
results="$work/results.tsv"
: >"$results"
# The engine's bandwidth per world size: GB/s each receiving rank gets from the root.
bandwidths="$work/bandwidth.tsv"
: >"$bandwidths"
for n in $(for layout in ${LAYOUTS:-dp:2 dp:4 tp:2 tp:4}; do echo "${layout##*:}"; done | sort -u); do
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  for ((rank = 0; rank < n; rank++)); do
    WORLD_SIZE=$n RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$build/bench/qload_dist_bench" --bytes $((256 << 20)) >"$work/dist$rank.out" &
  done
  wait
  cat "$work/dist0.out"
  printf '%s\t%s\n' "$n" "$(sed -nE 's/.*exchange .*\(([0-9.]+) GB\/s received per rank.*/\1/p' "$work/dist0.out")" >>"$bandwidths"
done
for ((round = 0; round < runs; round++)); do
  for cache in warm cold; do  # the single process: the bound's first term
    "$cache"
    start=$(date +%s.%N)
    "$qload" load "$model" --device cpu --json >"$work/single.json"
    end=$(date +%s.%N)
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("single", sys.argv[2], "single", float(sys.argv[4]) - float(sys.argv[3]), r["read_bytes"], r["peak_rss_bytes"], 0, sep="\t")' \
      "$work/single.json" "$cache" "$start" "$end" >>"$results"
  done
  for layout in ${LAYOUTS:-dp:2 dp:4 tp:2 tp:4}; do
    axis=${layout%%:*} n=${layout##*:}
    for cache in warm cold; do
      kinds=(independent shared)
      [[ $cache == warm ]] && kinds+=(forced)  # cold, share_cached auto shares anyway
      for kind in "${kinds[@]}"; do
        flags=()
        [[ $kind != independent ]] && flags=(--share-reads)
        export QLOAD_SHARE_CACHED=auto
        [[ $kind == forced ]] && export QLOAD_SHARE_CACHED=always
        "$cache"
        port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
        start=$(date +%s.%N)
        for ((rank = 0; rank < n; rank++)); do
          WORLD_SIZE=$n RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            "$qload" load "$model" --device cpu "--$axis" "$n" "${flags[@]}" --json >"$work/rank$rank.json" &
        done
        wait
        end=$(date +%s.%N)
        python3 - "$work" "$layout" "$start" "$end" "$cache" "$kind" >>"$results" <<'PY'
import json, sys
d, layout, start, end, cache, kind = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6]
reports = [json.load(open(f"{d}/rank{r}.json")) for r in range(int(layout.split(":")[1]))]
print(layout, cache, kind, end - start, sum(r["read_bytes"] for r in reports), sum(r["peak_rss_bytes"] for r in reports),
      max(r.get("shared_received_bytes", 0) for r in reports), sep="\t")
PY
      done
    done
  done
done
python3 - "$results" "$bandwidths" <<'PY'
import sys
best = {}
for line in open(sys.argv[1]):
    layout, cache, kind, sec, read, rss, received = line.split("\t")
    key = (layout, cache, kind)
    sec, read, rss, received = float(sec), int(read), int(rss), int(received)
    if key not in best or sec < best[key][0]:
        best[key] = (sec, read, max(rss, best.get(key, (0, 0, 0, 0))[2]), received)
bandwidth = {int(n): float(gbps) for n, gbps in (l.split("\t") for l in open(sys.argv[2]) if l.strip())}
print(f"\n{'layout':>6} {'cache':>5} {'loader':>11} {'read GB':>8} {'seconds':>8} {'peak RSS':>9} {'time ratio':>10} {'bound s':>8} {'/ bound':>7}")
for layout, cache in sorted({(k[0], k[1]) for k in best if k[0] != "single"}):
    base = best[(layout, cache, "independent")]
    single = best[("single", cache, "single")]
    # The bytes a shared read must deliver: what a rank received when the reads were shared (warm,
    # by default each rank reads its part from the page cache instead and receives nothing).
    delivered = best[(layout, cache, "forced" if cache == "warm" else "shared")][3]
    for kind in ("independent", "shared", "forced"):
        if (layout, cache, kind) not in best:
            continue
        q = best[(layout, cache, kind)]
        bound = ""
        if kind != "independent":
            b = single[0] + delivered / (bandwidth[int(layout.split(":")[1])] * 1e9)
            bound = f"{b:8.3f} {q[0] / b:7.2f}"
        print(f"{layout:>6} {cache:>5} {kind:>11} {q[1] / 1e9:8.3f} {q[0]:8.3f} {q[2] / 2**20:7.0f}Mi {q[0] / base[0]:10.3f} {bound}")
for cache in ("warm", "cold"):
    s = best[("single", cache, "single")]
    print(f"{'single':>6} {cache:>5} {'one process':>11} {s[1] / 1e9:8.3f} {s[0]:8.3f} {s[2] / 2**20:7.0f}Mi")
print("read GB and RSS are sums over the processes; time ratio: against independent (lower is better);")
print("shared: --share-reads as it runs by default (share_cached auto: warm, each rank reads its part from the page cache);")
print("forced: QLOAD_SHARE_CACHED=always, every tensor read by one rank and sent to the others through Gloo;")
print("bound: single + the most bytes one rank received when reads were shared / the engine's GB/s received per rank")
print("in an all-to-all exchange (qload_dist_bench), issue 20: shared <= bound")
PY
[ "${KEEP:-0}" = 1 ] || rm -rf "$model"

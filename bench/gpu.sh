#!/usr/bin/env bash
# Everything qload runs on a lent GPU machine, in one call: GPU tests, then benchmarks.
#
# The GPU machine has none of our Debian libraries, so build a static tree here, pack its
# binaries stripped (the device tool carries 64 MiB at most; a debug build is ~1 GB) and carry
# that:   QLOAD_STATIC=ON BUILD_DIR=build-static ./setup.sh && bench/gpu_pack.sh build-static build-gpu
# then, with the device tool: run `bench/gpu.sh build-gpu` carrying build-gpu (~21 MB).
# Results go to $OUT (the device tool's output folder) or /tmp/qload-gpu.
# SKIP="io_bench gpu_load_bench" leaves out the named steps: one device call may run for at
# most 10 minutes, and gpu_load_bench alone (synthesizing ~12 GB, three rounds of cold and warm
# loads and peers) takes several; its knobs (RUNS, KEEP, PEERS, ...) pass through the
# environment, see bench/gpu_load_bench.sh.
set -uo pipefail
build=${1:-build-gpu}
out=${OUT:-/tmp/qload-gpu}
mkdir -p "$out"
status=0
here=$(cd "$(dirname "$0")" && pwd)
step() {  # step NAME COMMAND...: runs, tees to $out/NAME.txt, remembers failure
  local name=$1; shift
  case " ${SKIP:-} " in *" $name "*) echo "== $name: skipped (SKIP)"; return ;; esac
  echo "== $name: $*"
  "$@" 2>&1 | tee "$out/$name.txt"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || { echo "== $name FAILED (exit $rc)"; status=1; }
}
step device nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv
step version "$build/qload" --version
step gpu_tests "$build/tests/qload_gpu_tests" --reporter compact
step quant_load_gpu "$here/../tests/gpu/quant_load_gpu.sh" "$build/qload"
# CPU-side suites run there too (different kernel and disks); the digest cases need xxhsum,
# which that machine lacks, so they are left to CI.
step io_tests "$build/tests/qload_io_tests" "~[digest]" --reporter compact
step selftest "$build/qload" selftest --dir /tmp
if [ -x "$build/bench/qload_io_bench" ]; then
  step io_bench "$build/bench/qload_io_bench" --dir /tmp --json "$out/io_bench.json"
fi
if [ -x "$build/bench/qload_h2d_bench" ]; then
  step h2d_bench "$build/bench/qload_h2d_bench" --json "$out/h2d_bench.json"
fi
# Quantized formats (issue 5): the CUDA decoders against a device-to-device copy, then whole
# quantized loads onto the GPU (kept packed, and dequantized there) against their bf16 twin.
if [ -x "$build/bench/qload_quant_bench" ]; then
  step quant_gpu_bench "$build/bench/qload_quant_bench" --gpu 0 --rows 8192 --cols 8192 --json "$out/quant_gpu_bench.json"
fi
step quant_load_bench env DEVICE=cuda:0 SCHEMES="gptq4 awq fp8-block ct-pack4" "$here/quant_load_bench.sh" "$build" /tmp/qload-quant-load-bench
# Its log, table included, is tee'd to $out/gpu_load_bench.txt by step; OUT is unset for it so
# that it does not also write its table to that same file.
step gpu_load_bench env -u OUT "$here/gpu_load_bench.sh" "$build" /tmp/qload-gpu-load-bench
exit $status

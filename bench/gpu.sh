#!/usr/bin/env bash
# Everything qload runs on a lent GPU machine, in one call: GPU tests, then benchmarks.
#
# The GPU machine has none of our Debian libraries, so build a static tree here, pack its
# binaries stripped (the device tool carries 64 MiB at most; a debug build is ~1 GB) and carry
# that:   QLOAD_STATIC=ON BUILD_DIR=build-static ./setup.sh && bench/gpu_pack.sh build-static build-gpu
# then, with the device tool: run `bench/gpu.sh build-gpu` carrying build-gpu (~37 MB), and
# .whl (~3.5 MB) after bench/gpu_wheels.sh, for the GPU peers the machine lacks (add ibm-fms's
# wheel there for FMS on the GPU: `pip download --no-deps -d .whl ibm-fms==1.13.1`).
# The Python package's steps (python_cuda_tests, clients_bench_cuda, and the qload peers of
# gpu_load_bench) need the extension built for the machine's CPython 3.12, packed beside:
#   python3.12 -m venv /tmp/venv312 && /tmp/venv312/bin/pip install nanobind
#   cmake -S . -B build-py312 -G Ninja -DPython_EXECUTABLE=/tmp/venv312/bin/python -DQLOAD_PYTHON=ON
#   cmake --build build-py312 --target _qload qload_python_package
#   PYTHON_BUILD=build-py312 bench/gpu_pack.sh build-static build-gpu        (~49 MB in all)
# (2026-11-29 on an H200: device 1 s, h2d_bench 7 s, gpu_tests 5 s, python_cuda_tests 7 s,
# clients_bench_cuda about 150 s, gpu_load_bench with LAYERS=16 RUNS=1 COLD=0 about 70 s.)
#
# Results: the device tool returns at most 8 files, so every step's log (and its JSON, if any)
# goes into one tarball, $OUT/gpu-results.tar.gz, and one line per step (status, seconds) into
# $OUT/summary.txt, which is also printed last. OUT defaults to /tmp/qload-gpu.
#
# One device call may run for at most 10 minutes. Choose steps with
#   ONLY="gpu_tests quant_load_gpu"   run just these steps, or
#   SKIP="io_bench gpu_load_bench"    leave these out, and
#   STEP_TIMEOUT=120                    stop any one step after that many seconds
#   STEP_TIMEOUT_gpu_load_bench=300     (the same for one step).
# gpu_load_bench alone (synthesizing ~12 GB, rounds of cold and warm loads and peers) takes
# several minutes; its knobs (RUNS, KEEP, PEERS, MIN_BYTES, LAYERS, ...) pass through the
# environment, see bench/gpu_load_bench.sh.
#
# TINY=1 runs every step at toy sizes (a few test cases, megabyte-sized models and copies): CI
# runs it so on the simulated GPU (a QLOAD_CUDA_SIM build, test bench.gpu_sh_on_simulator),
# so that a script error cannot waste a real GPU's call. Its figures mean nothing.
set -uo pipefail
tiny=${TINY:-0}
# tiny_or FULL TINY: the argument for this run's size.
tiny_or() { if [ "$tiny" = 1 ]; then echo "$2"; else echo "$1"; fi; }
build=${1:-build-gpu}
out=${OUT:-/tmp/qload-gpu}
logs=$(mktemp -d /tmp/qload-gpu-logs.XXXXXX)
mkdir -p "$out"
status=0
here=$(cd "$(dirname "$0")" && pwd)
summary="$out/summary.txt"
: >"$summary"

wanted() {  # wanted NAME: is this step selected by ONLY / SKIP?
  local name=$1
  if [ -n "${ONLY:-}" ]; then case " $ONLY " in *" $name "*) ;; *) return 1 ;; esac; fi
  case " ${SKIP:-} " in *" $name "*) return 1 ;; esac
  return 0
}
step() {  # step NAME COMMAND...: runs, tees to the log NAME.txt, records status and time
  local name=$1; shift
  if ! wanted "$name"; then echo "$name: not selected" >>"$summary"; return; fi
  echo "== $name: $*"
  local t0=$SECONDS
  # STEP_TIMEOUT_<name> (e.g. STEP_TIMEOUT_gpu_load_bench=300) overrides STEP_TIMEOUT for one step.
  local own="STEP_TIMEOUT_$name"
  local limit=${!own:-${STEP_TIMEOUT:-0}}
  timeout "$limit" "$@" 2>&1 | tee "$logs/$name.txt"
  local rc=${PIPESTATUS[0]} verdict=ok
  [ "$rc" -eq 124 ] && verdict="TIMED OUT after ${limit}s"
  [ "$rc" -eq 0 ] || { [ "$rc" -eq 124 ] || verdict="FAILED (exit $rc)"; status=1; }
  echo "== $name: $verdict"
  echo "$name: $verdict in $((SECONDS - t0)) s" >>"$summary"
  # Re-pack after every step, so that a call cut off at its limit still brings back the
  # logs of the steps that finished.
  tar -czf "$out/gpu-results.tar.gz" -C "$logs" .
}

# Python packages carried as wheels (bench/gpu_wheels.sh: the GPU peers the machine lacks).
wheels_dir="$here/../.whl"
if compgen -G "$wheels_dir/*.whl" >/dev/null; then
  if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/qload-site "$wheels_dir"/*.whl; then
    export PYTHONPATH="/tmp/qload-site${PYTHONPATH:+:$PYTHONPATH}"
    echo "wheels: installed $(cd "$wheels_dir" && echo *.whl)" >>"$summary"
  else
    echo "wheels: could not install $wheels_dir/*.whl (the peers that need them are skipped)" >>"$summary"
  fi
fi

# NCCL: GPU machines often have it only inside a Python environment (the nvidia-nccl wheels).
if ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2'; then
  nccl_dir=$(python3 - 2>/dev/null <<'EOF'
import os, nvidia.nccl as n
for p in n.__path__:
    if os.path.exists(os.path.join(p, "lib", "libnccl.so.2")):
        print(os.path.join(p, "lib"))
        break
EOF
)
  if [ -n "$nccl_dir" ]; then
    export LD_LIBRARY_PATH="$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "nccl: using $nccl_dir/libnccl.so.2 (python's nvidia-nccl)" >>"$summary"
  else
    echo "nccl: no libnccl.so.2 on this machine; NCCL cases skip" >>"$summary"
  fi
fi

# The Python package, where the build folder carries one (bench/gpu_pack.sh PYTHON_BUILD=...: the
# extension built for the machine's Python 3.12, and the shared libraries it needs beside it).
if [ -d "$build/python/qload" ]; then
  export PYTHONPATH="$(cd "$build/python" && pwd)${PYTHONPATH:+:$PYTHONPATH}"
  [ -d "$build/lib" ] && export LD_LIBRARY_PATH="$(cd "$build/lib" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

if command -v nvidia-smi >/dev/null || [ "$tiny" != 1 ]; then
  step device nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv
fi
step version "$build/qload" version
# Tiny: the cases tagged [cuda] only (the simulator build's ctest runs the whole suite).
step gpu_tests "$build/tests/qload_gpu_tests" --reporter compact $(tiny_or "" "[cuda]")
step quant_load_gpu env SCHEMES="$(tiny_or "${SCHEMES:-}" "gptq4 fp8-block")" "$here/../tests/gpu/quant_load_gpu.sh" "$build/qload"
# The Python package on the GPU (issues 16 and 44): loads, streams, safe_open and load_into into
# torch's own CUDA tensors; then FMS and transformers built on cuda:0 through qload against their
# own loaders (time, host and device peak, identical logits). Only where the package came along.
if [ -d "$build/python/qload" ]; then
  step python_cuda_tests env QLOAD_TEST_CLI="$(cd "$build" && pwd)/qload" PYTHONDONTWRITEBYTECODE=1 \
    python3 -m pytest -q -p no:cacheprovider -rs "$here/../python/tests/test_load_into.py" \
    "$here/../python/tests/clients/test_cuda_destinations.py" "$here/../python/tests/clients/test_load_into_devices.py"
  step clients_bench_cuda env HF_HUB_OFFLINE=1 python3 "$here/clients_bench.py" --qload "$build/qload" \
    --device cuda:0 --clients fms,transformers $(tiny_or "--rounds 2 --layers 8" "--rounds 1 --layers 1")
fi
# compute-sanitizer over the GPU tests: out-of-bounds and misaligned accesses, shared-memory
# races between threads, and illegal barriers. Each runs the suite under instrumentation.
# API errors are not counted: the suite provokes them on purpose (allocating more than the GPU
# has, an unknown device ordinal) and checks qload's answer to each.
if command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck synccheck; do
    step "sanitizer_$tool" compute-sanitizer --tool "$tool" --error-exitcode 3 --report-api-errors no \
      "$build/tests/qload_gpu_tests" --reporter compact
  done
fi
# CPU-side suites run there too (different kernel and disks); the digest cases need xxhsum,
# which that machine lacks, so they are left to CI.
step io_tests "$build/tests/qload_io_tests" "$(tiny_or "~[digest]" "[uring]")" --reporter compact
step selftest "$build/qload" selftest --dir /tmp $(tiny_or "" "--bytes 8000001")
step h2d_bench "$build/bench/qload_h2d_bench" --json "$logs/h2d_bench.json" $(tiny_or "" "--size 8MiB --repeat 1")
# Quantized formats (issue 5): the CUDA decoders against a device-to-device copy, then whole
# quantized loads onto the GPU (kept packed, and dequantized there) against their bf16 twin.
step quant_gpu_bench "$build/bench/qload_quant_bench" --gpu 0 $(tiny_or "--rows 8192 --cols 8192" "--rows 256 --cols 512 --repeat 1") \
  --json "$logs/quant_gpu_bench.json"
toy_model=(LAYERS=1 HIDDEN=256 INTERMEDIATE=512 VOCAB=512 HEADS=4 KV_HEADS=2 SHARDS=1 RUNS=1)
step quant_load_bench env DEVICE=cuda:0 SCHEMES="$(tiny_or "gptq4 awq fp8-block ct-pack4" "gptq4 fp8-block")" \
  $(tiny_or "" "${toy_model[*]}") "$here/quant_load_bench.sh" "$build" /tmp/qload-quant-load-bench
step io_bench "$build/bench/qload_io_bench" --dir /tmp --json "$logs/io_bench.json" \
  $(tiny_or "" "--quick --size 16MiB --depths 1,8 --drop fadvise")
# OUT is unset for it so that it does not also write its table beside ours; its log holds it.
# 16 layers (6.2 GB) and 2 rounds keep the whole script inside one 10-minute device call
# (2026-11-25 on an H100: synthesis plus one round took 95 s); LAYERS/RUNS/MIN_BYTES override.
if [ "$tiny" = 1 ]; then
  step gpu_load_bench env -u OUT "${toy_model[@]}" MIN_BYTES=0 H2D_SIZE=8MiB PEERS= COLD=0 \
    "$here/gpu_load_bench.sh" "$build" /tmp/qload-gpu-load-bench
else
  step gpu_load_bench env -u OUT LAYERS="${LAYERS:-16}" RUNS="${RUNS:-2}" MIN_BYTES="${MIN_BYTES:-4000000000}" \
    "$here/gpu_load_bench.sh" "$build" /tmp/qload-gpu-load-bench
fi
# Issue 48: cold and warm CPU loads against the whole-file O_DIRECT and buffered readers, on
# this machine's cores and NVMe (last: the GPU steps come first within the device call).
# Full size: the bench synthesizes its 1.65 GiB checkpoint itself; tiny: a toy one.
cpu_ckpt=/tmp/qload-cpu-load-bench-tiny
if [ "$tiny" = 1 ] && [ ! -d "$cpu_ckpt" ]; then
  "$build/qload" synth "$cpu_ckpt" --layers 1 --hidden 256 --shards 2 >/dev/null
fi
step cpu_load_bench python3 "$here/cpu_load_bench.py" "$build" $(tiny_or "" "$cpu_ckpt") \
  $(tiny_or "--rounds 3" "--rounds 1 --memory asis")

rm -rf "$logs"
echo "== summary ($summary)"
cat "$summary"
exit $status

#!/usr/bin/env bash
# The checking build: the whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer
# (clang 16, into build-asan/), then every libFuzzer target for FUZZ_SECONDS (default 30) each.
# Any sanitizer report fails the test that hit it; a fuzz crash prints its reproducer. First,
# clang-tidy's bug checks over the product sources (tests/style/tidy.sh), which need clang's
# compile commands.
# The GPU paths run here on the simulated CUDA runtime (QLOAD_CUDA_SIM, cudasim/): the whole
# suite on 2 simulated GPUs (with bench/gpu.sh end to end at toy sizes: bench.gpu_sh_on_simulator),
# then the GPU tests again on 4. No GPU figure comes from this.
# ccache keeps rebuilds cheap.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${ASAN_BUILD_DIR:-build-asan}
source tests/clang_build.sh
clang_build "$build" address,undefined -DQLOAD_BUILD_BENCH=ON -DQLOAD_FUZZ=ON
cmake --build "$build" --parallel "${JOBS:-$(nproc)}"
# clang-tidy's bug checks (.clang-tidy) over the product sources, with this build's clang flags.
tests/style/tidy.sh "$build"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:detect_stack_use_after_return=1:strict_string_checks=1:check_initialization_order=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir "$build" --output-on-failure -j"${JOBS:-$(nproc)}"
QLOAD_CUDASIM_DEVICES=4 ctest --test-dir "$build" --output-on-failure -j"${JOBS:-$(nproc)}" -L "^(gpu|cudasim)$"
fuzz/run.sh "${FUZZ_SECONDS:-30}" "$build"
echo "sanitize: clang-tidy, the test suite (GPU paths on 2 and 4 simulated GPUs) and the fuzz targets ran clean under ASan + UBSan"

#!/usr/bin/env bash
# The threaded tests under ThreadSanitizer (clang 16, into build-tsan/): the executor, the I/O
# thread and readers (io_uring, the pread pool, page filling), the copy lanes on the simulated
# GPUs, the shared-read exchanges between processes, and the pulled stream. Not part of
# .ci/run: CI's budget holds one checking build (tests/sanitize.sh, ASan + UBSan), and TSan
# cannot share it. Run it after changing anything that threads touch; any report fails it.
# tests/tsan/suppressions.txt lists the third-party reports it ignores, each with its reason.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${TSAN_BUILD_DIR:-build-tsan}
source tests/clang_build.sh
clang_build "$build" thread -DQLOAD_WERROR=OFF
suites=(qload_io_tests qload_scheduler_tests qload_session_tests qload_distributed_tests qload_gpu_tests)
cmake --build "$build" --parallel "${JOBS:-$(nproc)}" --target "${suites[@]}"
symbolizer=$(command -v llvm-symbolizer-16 || command -v llvm-symbolizer || true)
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan/suppressions.txt${symbolizer:+ external_symbolizer_path=$symbolizer}"
# The GPU paths on two simulated GPUs (their copy lanes and events are threads too).
export QLOAD_CUDASIM_DEVICES=2
source tests/cli/clean_env.sh
for suite in "${suites[@]}"; do
  echo "tsan: $suite"
  "$build/tests/$suite" --reporter compact
done
echo "tsan: the threaded suites ran clean under ThreadSanitizer"

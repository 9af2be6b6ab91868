#!/usr/bin/env bash
# Packs what bench/gpu.sh needs into a folder small enough for the device tool to carry
# (64 MiB in all): the static build's binaries, stripped (each ~100 MB with debug info, ~5 MB
# without), in the layout gpu.sh expects (DIR/qload, DIR/tests/..., DIR/bench/...).
#
# Usage: QLOAD_STATIC=ON BUILD_DIR=build-static ./setup.sh && bench/gpu_pack.sh build-static build-gpu
#        then with the device tool: bench/gpu.sh build-gpu, carrying build-gpu.
set -euo pipefail
from=${1:-build-static}
to=${2:-build-gpu}
rm -rf "$to"
mkdir -p "$to/tests" "$to/bench"
for f in qload tests/qload_gpu_tests tests/qload_io_tests bench/qload_io_bench bench/qload_h2d_bench \
         bench/qload_plain_read bench/qload_convert_bench bench/qload_quant_bench; do
  [ -x "$from/$f" ] || { echo "gpu_pack: $from/$f is missing (build it first)"; exit 1; }
  strip -o "$to/$f" "$from/$f"
done
if ldd "$to/qload" 2>/dev/null | grep -vqE 'linux-vdso|libc\.so|libm\.so|ld-linux|libgcc_s|libpthread|libdl|librt'; then
  echo "gpu_pack: $to/qload needs shared libraries the device machine lacks (use QLOAD_STATIC=ON):"
  ldd "$to/qload"
  exit 1
fi
# The Python package too, where PYTHON_BUILD names a build of it for the machine's Python (3.12:
# cmake -DPython_EXECUTABLE=<a 3.12 venv with nanobind>; the lent machine has no compiler for our
# libraries): the package stripped, and the shared libraries the extension needs that a bare
# machine lacks, into DIR/lib (bench/gpu.sh puts them on LD_LIBRARY_PATH).
if [ -n "${PYTHON_BUILD:-}" ]; then
  mkdir -p "$to/python" "$to/lib"
  cp -r "$PYTHON_BUILD/python/qload" "$PYTHON_BUILD"/python/qload-*.dist-info "$to/python/"
  strip "$to"/python/qload/_qload*.so
  ldd "$PYTHON_BUILD"/python/qload/_qload*.so | awk '/=> \//{print $3}' |
    grep -vE '/(libc|libm|libgcc_s|libstdc\+\+|ld-linux[^/]*|libpthread|libdl|librt)\.so' | xargs -r -I{} cp -L {} "$to/lib/"
fi
du -sh "$to"

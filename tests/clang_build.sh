# Sourced by tests/sanitize.sh and tests/tsan.sh: configures a clang 16 build for checking
# (Debug at -O1, the simulated GPUs, no Python package) with ccache where there is one.
#   clang_build DIR SANITIZERS [CMAKE_ARGS...]
clang_build() {
  local dir=$1 sanitizers=$2
  shift 2
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # Paths relative to the checkout, so clones in other folders (CI's) hit the same cache.
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
  CC=clang-16 CXX=clang++-16 cmake -S . -B "$dir" -G Ninja "${launcher[@]}" \
    -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-g -O1" -DCMAKE_CXX_FLAGS_DEBUG="-g -O1" \
    -DQLOAD_CUDA_SIM=ON -DQLOAD_PYTHON=OFF -DQLOAD_SANITIZE="$sanitizers" "$@" >/dev/null
}

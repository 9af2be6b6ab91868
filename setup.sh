#!/usr/bin/env bash
# Sets up a Debian bookworm machine for qload and builds it into ./build.
#   - installs the Debian packages qload needs that are missing (apt-get runs only then);
#   - configures with CMake (CUDA and NCCL from /usr/local/cuda when present) and builds.
#   - makes the Python environment the Python package builds and tests in (nanobind, numpy,
#     safetensors, ml_dtypes, pytest from PyPI; python/requirements-dev.txt), once per version
#     of that file, under ~/.cache/qload so that it outlives checkouts.
# Environment: BUILD_DIR (default build), QLOAD_WERROR (default ON), QLOAD_CUDA (AUTO),
# QLOAD_STATIC (OFF), CMAKE_BUILD_TYPE (RelWithDebInfo), JOBS (default: all cores),
# QLOAD_PYTHON (AUTO; OFF skips the environment and the package), QLOAD_VENV (its folder).
set -euo pipefail
cd "$(dirname "$0")"

packages=(
  build-essential cmake ninja-build pkg-config   # toolchain
  liburing-dev libxxhash-dev libluajit-5.1-dev   # I/O, checksums, recipes
  libre2-dev                                     # regular expressions in quantization configs
  nlohmann-json3-dev libcli11-dev libfmt-dev     # JSON, CLI parsing, formatting
  libssl-dev libgloo-dev                         # distributed/: HMAC-SHA256 (libcrypto), Gloo for host memory
  catch2 xxhash clang-format python3             # tests: Catch2 v2, xxhsum reference, style, CLI checks
  ccache                                         # rebuilds (CI keeps its cache warm)
  clang-16 libclang-rt-16-dev clang-tidy-16      # the checking build: ASan + UBSan, libFuzzer, clang-tidy
  python3-venv python3-dev                       # the Python package's build environment
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

build_dir=${BUILD_DIR:-build}
python_args=()
if [ "${QLOAD_PYTHON:-AUTO}" != OFF ]; then
  requirements=python/requirements-dev.txt
  stamp=$(sha256sum "$requirements" | cut -c1-16)
  venv=${QLOAD_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/qload/venv-$stamp}
  if [ ! -f "$venv/.qload-ready" ]; then
    echo "setup: making the Python environment $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements"
    touch "$venv/.qload-ready"
  fi
  python_args=(-DPython_EXECUTABLE="$venv/bin/python" -DQLOAD_PYTHON="${QLOAD_PYTHON:-AUTO}")
fi
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# CI's builds (this one, the Python wheel, the ASan+UBSan one) fill ccache's default 5 GB, and
# an evicting cache rebuilds most of the tree on every run: give it 20 GB unless set larger.
if command -v ccache >/dev/null; then
  max=$(ccache --get-config max_size 2>/dev/null || true)
  case "$max" in
    0 | *T) gigabytes=20 ;;  # 0: unlimited
    *G) gigabytes=${max%G} && gigabytes=${gigabytes%%.*} ;;
    *) gigabytes=0 ;;
  esac
  [ "$gigabytes" -ge 20 ] 2>/dev/null || ccache --max-size=20G >/dev/null
fi
# Paths relative to the checkout, so clones in other folders (CI's) hit the same cache.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
cmake -S . -B "$build_dir" -G Ninja "${launcher[@]}" \
  -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" \
  -DQLOAD_WERROR="${QLOAD_WERROR:-ON}" \
  -DQLOAD_CUDA="${QLOAD_CUDA:-AUTO}" \
  -DQLOAD_STATIC="${QLOAD_STATIC:-OFF}" "${python_args[@]}"
cmake --build "$build_dir" --parallel "${JOBS:-$(nproc)}"
echo "setup: built $build_dir/qload"

#!/usr/bin/env bash
# Fetches, here (where PyPI is reachable), the wheels of the GPU peers that the lent GPU
# machine lacks, for its Python (3.12, manylinux x86-64): fastsafetensors and the Run:ai model
# streamer (their own needs, typer, humanize, numpy and torch, are already there). bench/gpu.sh
# installs whatever it finds in .whl/ before its steps, so carry `.whl` with the build:
#   bench/gpu_wheels.sh && (device tool) run `bench/gpu.sh build-gpu`, carrying build-gpu and .whl
# About 3.5 MB. .whl/ is ignored by git. Usage: bench/gpu_wheels.sh [DIR]   (default: .whl)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.whl}
mkdir -p "$dir"
platforms=()
for n in 17 24 27 28 30 31 34 35; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
for package in fastsafetensors runai-model-streamer; do
  python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${platforms[@]}" --platform manylinux2014_x86_64 -d "$dir" "$package"
done
ls -l "$dir"

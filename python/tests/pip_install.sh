#!/usr/bin/env bash
# `pip install .` as a user runs it, from this checkout: builds the wheel with scikit-build-core
# (pyproject.toml; compiler output cached by ccache where it is installed), installs it into a
# fresh virtual environment, and imports it from outside the source tree: the native module,
# its type stubs, the vLLM entry point, and a load of a checkpoint the built CLI synthesized.
# Usage: pip_install.sh PYTHON QLOAD_TEST_CLI   (PYTHON: an interpreter with scikit-build-core and
# nanobind, the one setup.sh made; ctest passes it). Exit 77 (skipped) when PyPI cannot be
# reached for the wheel's own dependencies.
set -euo pipefail
python=$1 cli=$(realpath "$2")
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if command -v ccache > /dev/null; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache
  # Paths relative to the checkout, so clones in other folders (CI's) hit the same cache.
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
fi
# The wheel is built in build/pip/<tag> of the checkout (pyproject.toml), so a second run is
# incremental. --no-build-isolation: the build requirements come from PYTHON's environment.
"$python" -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps -w "$work/dist" "$root"
wheel=$(ls "$work"/dist/qload-*.whl)
"$python" - "$wheel" <<'PY'
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
for want in ("qload/__init__.py", "qload/_qload.pyi", "qload/py.typed", "qload/vllm.py"):
    assert want in names, f"{want} missing from the wheel"
assert any(n.startswith("qload/_qload.") and n.endswith(".so") for n in names), "no native module in the wheel"
PY

"$python" -m venv "$work/env"
if ! "$work/env/bin/python" -m pip install -q --disable-pip-version-check "$wheel[bf16]"; then
  echo "SKIPPED: could not install the wheel's dependencies (numpy, ml_dtypes) from PyPI"
  exit 77
fi
"$cli" synth "$work/tiny" --layers 1 --shards 2 > /dev/null
"$cli" inspect --json "$work/tiny" > "$work/inspect.json"
cd "$work"  # nothing of the checkout on the import path
"$work/env/bin/python" - "$work/tiny" "$work/inspect.json" <<'PY'
import importlib.metadata, json, os, sys
import qload

assert os.path.dirname(qload.__file__).startswith(sys.prefix), f"imported {qload.__file__}, not the installed package"
model = qload.load(sys.argv[1], framework="np")
inspected = json.load(open(sys.argv[2]))
assert set(model) == {t["name"] for t in inspected["tensors"]}, "the installed package loaded other tensors"
for t in inspected["tensors"]:  # every tensor's bytes, as the CLI locates them in the files
    with open(t["file"], "rb") as f:
        f.seek(t["offset"])
        stored = f.read(t["nbytes"])
    assert list(model[t["name"]].shape) == t["shape"] and model[t["name"]].tobytes() == stored, t["name"]
plugins = [e for e in importlib.metadata.entry_points(group="vllm.general_plugins") if e.name == "qload"]
assert plugins and plugins[0].value == "qload.vllm:register", plugins
print(f"pip install: {len(model)} tensors loaded by the installed wheel {os.path.basename(sys.argv[1])}")
PY

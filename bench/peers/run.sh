#!/usr/bin/env bash
# The peer benchmark suite in one command: qload against safetensors, fastsafetensors, the
# Run:ai model streamer, tensorizer, torch.load and gguf-py on the same checkpoint, cold and
# warm, each load in its own process (bench/peers/run.py says how it measures).
#
# Usage: bench/peers/run.sh [BUILD_DIR] [run.py OPTIONS...]
#   e.g. bench/peers/run.sh build --rounds 3 --markdown docs/peers.md --chart docs/peers.svg
# Needs root for the cold runs (it drops the page cache). Makes its Python environment once:
# ~/.cache/qload/peers-<hash of requirements.txt> (about 5 GB; QLOAD_PEERS_VENV names another),
# from the interpreter setup.sh built the qload package for, and loads qload from BUILD_DIR.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=build
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then build=$1; shift; fi
build=$(cd "$build" && pwd)
[ -x "$build/qload" ] && [ -x "$build/bench/qload_plain_read" ] || { echo "peers: build $build first (./setup.sh)" >&2; exit 1; }
[ -d "$build/python/qload" ] || { echo "peers: $build has no Python package (configure with QLOAD_PYTHON=ON; ./setup.sh does)" >&2; exit 1; }

requirements="$here/requirements.txt"
stamp=$(sha256sum "$requirements" | cut -c1-16)
venv=${QLOAD_PEERS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/qload/peers-$stamp}
# The qload module was built for the interpreter in the CMake cache; the environment must match.
python=$(sed -n 's/^Python_EXECUTABLE:[A-Z]*=//p' "$build/CMakeCache.txt")
python=${python:-python3}
if [ ! -f "$venv/.qload-ready" ]; then
  echo "peers: making $venv from $requirements (once)" >&2
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements"
  touch "$venv/.qload-ready"
fi
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1
exec "$venv/bin/python" "$here/run.py" --qload "$build/qload" --reader "$build/bench/qload_plain_read" "$@"

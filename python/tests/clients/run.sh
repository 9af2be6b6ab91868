#!/usr/bin/env bash
# Runs the real-client tests (torch, transformers, compressed-tensors) in an environment this
# script makes once and keeps: ~/.cache/qload/clients-<hash of python/requirements-clients.txt>,
# from the same Python the package was built for.
# Usage: run.sh PYTHON PACKAGE_DIR QLOAD_CLI   (ctest passes them). Exit 77 (ctest: skipped)
# when the environment cannot be made here (no network to PyPI, no space), saying why.
set -uo pipefail
python=$1 package_dir=$(cd "$2" && pwd) cli=$(realpath "$3")
here=$(cd "$(dirname "$0")" && pwd)
requirements="$here/../../requirements-clients.txt"
stamp=$(sha256sum "$requirements" | cut -c1-16)
venv=${QLOAD_CLIENTS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/qload/clients-$stamp}
if [ ! -f "$venv/.qload-ready" ]; then
  echo "clients: making $venv (torch, transformers, compressed-tensors; once)"
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  if ! "$python" -m venv "$venv" || ! "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements"; then
    echo "SKIPPED: could not install the client packages from PyPI into $venv"
    rm -rf "$venv"
    exit 77
  fi
  touch "$venv/.qload-ready"
fi
export PYTHONPATH="$package_dir${PYTHONPATH:+:$PYTHONPATH}" QLOAD_CLI="$cli" PYTHONDONTWRITEBYTECODE=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false
cd "$here" && exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$here"

#!/usr/bin/env bash
# Runs a suite of real-client tests (clients: torch, transformers, compressed-tensors, ibm-fms;
# vllm: vLLM) in an environment this script makes once and keeps:
# ~/.cache/qload/SUITE-<hash of python/requirements-SUITE.txt>, from the same Python the
# package was built for.
# Usage: run_suite.sh SUITE PYTHON PACKAGE_DIR QLOAD_TEST_CLI [PYTEST ARGS]   (ctest passes them).
# Exit 77 (ctest: skipped) when the environment cannot be made here (no network to PyPI, no
# space), saying why. QLOAD_<SUITE>_VENV (e.g. QLOAD_CLIENTS_VENV) names another environment.
set -uo pipefail
suite=$1 python=$2 package_dir=$(cd "$3" && pwd) cli=$(realpath "$4")
shift 4
root=$(cd "$(dirname "$0")" && pwd)
here="$root/$suite"
requirements="$root/../requirements-$suite.txt"
stamp=$(sha256sum "$requirements" | cut -c1-16)
override="QLOAD_${suite^^}_VENV"
venv=${!override:-${XDG_CACHE_HOME:-$HOME/.cache}/qload/$suite-$stamp}
if [ ! -f "$venv/.qload-ready" ]; then
  echo "$suite: making $venv from $requirements (once)"
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  # In the default place, environments of this suite's older requirements (5-9 GB each) go.
  if [ -z "${!override:-}" ]; then
    find "$(dirname "$venv")" -maxdepth 1 -name "$suite-*" ! -path "$venv" -exec rm -rf {} +
  fi
  if ! "$python" -m venv "$venv" || ! "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements"; then
    echo "SKIPPED: could not install the client packages from PyPI into $venv"
    rm -rf "$venv"
    exit 77
  fi
  touch "$venv/.qload-ready"
fi
# The suite's qload sees only the harness's QLOAD_TEST_* / QLOAD_CUDASIM_* variables (the
# caller's own QLOAD_* settings would change what it does), and QLOAD_TEST_HOST_LAYOUT as the
# host layout (python.SUITE.aligned_layout).
source "$root/../../tests/cli/clean_env.sh"
export PYTHONPATH="$package_dir${PYTHONPATH:+:$PYTHONPATH}" QLOAD_TEST_CLI="$cli" PYTHONDONTWRITEBYTECODE=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false
# From a scratch directory: some clients write into the working directory (GPTQModel its logs/).
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cd "$scratch" && "$venv/bin/python" -m pytest -q -p no:cacheprovider --rootdir "$here" "$here" "$@"

# Sourced by the multi-process tests (multiprocess.sh, world_layouts.sh, world_faults.sh): a
# scratch directory $dir, removed at exit unless KEEP=1; the ranks a test starts in the
# background, listed in $pids, killed at exit; the rendezvous on this machine; a free TCP port.
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  [[ -n ${KEEP:-} ]] || rm -rf "$dir"
}
trap cleanup EXIT
export MASTER_ADDR=127.0.0.1 QLOAD_RENDEZVOUS_TIMEOUT=60
# The checkpoints these tests write are in the page cache, where shared reads would by default
# (share_cached auto) be left to each process: these tests are of the shared paths.
export QLOAD_SHARE_CACHED=always
unset QLOAD_STRAGGLER_TIMEOUT QLOAD_WORLD_TOKEN QLOAD_WORLD_TOKEN_FILE
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

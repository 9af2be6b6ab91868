#!/usr/bin/env bash
# Faults in a multi-process load, with real processes on this machine (tests/cli/world_rank.cpp
# misbehaves on command after its first read, from inside the load):
#  1. A slow rank (3 s late): every rank still loads everything.
#  2. A rank killed mid-load (SIGKILL), in worlds of 2 and 4, sharing reads or not, rank 0
#     included: every other rank fails within seconds, naming the dead rank and the stage.
#  3. A hung rank (SIGSTOP) with straggler_timeout=3s: every other rank fails once it passes,
#     naming the hung rank and the setting; resumed afterwards, the hung rank fails too (its
#     world is gone), naming a rank it lost, instead of exiting 0 without its tensors.
#  4. MASTER_PORT already taken by another program: both ranks fail within the rendezvous
#     timeout, rank 0 naming the address.
#  5. A stranger's connection to rank 0 (a 20-byte hello, then silence) is dropped and logged,
#     and the load goes on; a rank with the wrong token is refused and nobody exits 0.
#  6. `qload load` started alone in a world of 2 with no layout says at once why it cannot
#     load, says while it waits for the others, and ends with that first error.
# Nothing may hang: every world is bounded, and the test fails on a wait past its bound.
# Usage: world_faults.sh QLOAD WORLD_RANK
source "$(dirname "${BASH_SOURCE[0]}")/clean_env.sh"  # only the QLOAD_* variables this test sets
set -euo pipefail
qload=$1
rank_bin=$2
source "$(dirname "$0")/world_common.sh"
"$qload" synth "$dir/m" --layers 2 --hidden 256 --intermediate 512 --vocab 512 --heads 4 --kv-heads 2 >/dev/null
tensors=$(WORLD_SIZE=1 RANK=0 "$rank_bin" "$dir/m" own none | sed 's/rank 0: \([0-9]*\) tensors/\1/')

# launch TAG SIZE RANK LAYOUT FAULT: one rank of a world of SIZE in the background (its pid
# appended to pids); its output in $dir/TAG.RANK.{out,err}. MASTER_PORT as exported.
launch() {
  WORLD_SIZE=$2 RANK=$3 LOCAL_RANK=$3 LOCAL_WORLD_SIZE=$2 \
    "$rank_bin" "$dir/m" "$4" "$5" >"$dir/$1.$3.out" 2>"$dir/$1.$3.err" &
  pids+=($!)
}
# fresh_world TIMEOUT: a new world's rendezvous (a free port, TIMEOUT seconds), clock and pids.
fresh_world() {
  export QLOAD_RENDEZVOUS_TIMEOUT=$1 MASTER_PORT
  MASTER_PORT=$(free_port)
  started=$(date +%s)
  pids=()
}
# start SIZE TAG LAYOUT FAULT_RANK FAULT: every rank of a world on a fresh port, FAULT on
# rank FAULT_RANK; pids[r] is rank r.
start() {
  local size=$1 tag=$2 layout=$3 victim=$4 fault=$5
  MASTER_PORT=$(free_port)
  export MASTER_PORT
  pids=()
  for ((r = 0; r < size; r++)); do
    local f=none
    ((r != victim)) || f=$fault
    launch "$tag" "$size" $r "$layout" "$f"
  done
}
# running PID: our child, alive and not stopped (its state in /proc: no procps on a bare
# machine). A child that has exited may already be reaped by bash and its PID taken by another
# process (pid_max is 32768 here, and ctest runs other tests beside this one), so the entry
# counts only while its parent is this shell.
running() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  local rest=${stat##*) }        # "STATE PPID ...", after the command name
  local state=${rest%% *} ppid
  rest=${rest#* }
  ppid=${rest%% *}
  [[ $ppid == "$$" && $state != [TZX] ]]
}
# finish TAG RANK BOUND: waits for rank RANK (at most BOUND seconds after `start`); its exit
# code in $dir/TAG.RANK.rc.
started=0
finish() {
  local tag=$1 r=$2 bound=$3 rc=0
  local pid=${pids[$r]}
  while running "$pid" && (($(date +%s) - started < bound)); do
    sleep 0.1
  done
  if running "$pid"; then
    echo "$tag: rank $r still running after ${bound}s"
    cat "$dir/$tag.$r.err"
    exit 1
  fi
  { wait "$pid"; } 2>/dev/null || rc=$?  # (quietly: bash reports the victims' signals)
  echo "$rc" >"$dir/$tag.$r.rc"
}
expect() {  # TAG RANK RC TEXT...: rank RANK exited RC (or "fail": any error exit) saying each TEXT
  local tag=$1 r=$2 want=$3 rc
  shift 3
  rc=$(cat "$dir/$tag.$r.rc")
  if [[ $want == fail ]]; then
    ((rc != 0 && rc < 128)) || { echo "$tag: rank $r exited $rc, expected an error"; cat "$dir/$tag.$r.err"; exit 1; }
  else
    [[ $rc == "$want" ]] || { echo "$tag: rank $r exited $rc, expected $want"; cat "$dir/$tag.$r.err"; exit 1; }
  fi
  for text in "$@"; do
    grep -qF -- "$text" "$dir/$tag.$r.err" "$dir/$tag.$r.out" ||
      { echo "$tag: rank $r does not say: $text"; cat "$dir/$tag.$r.err"; exit 1; }
  done
}

# 1. A slow rank.
started=$(date +%s)
start 2 slow dp 1 sleep:3000
for r in 0 1; do finish slow $r 60; expect slow $r 0 "rank $r: $tensors tensors"; done
echo "a rank 3 s late: both ranks loaded all $tensors tensors"

# 2. A rank killed mid-load.
for world in "2 1 dp" "2 1 own" "4 2 dp" "4 0 tp" "4 3 tp"; do
  read -r size victim layout <<<"$world"
  tag=killed$size$victim$layout
  started=$(date +%s)
  start "$size" "$tag" "$layout" "$victim" kill
  for ((r = 0; r < size; r++)); do finish "$tag" $r 30; done
  expect "$tag" "$victim" 137
  for ((r = 0; r < size; r++)); do
    ((r == victim)) || expect "$tag" $r fail "rank $victim" "stage:"
  done
  echo "rank $victim of $size killed mid-load ($layout): every other rank failed within $(($(date +%s) - started)) s naming it"
done

# 3. A hung rank.
export QLOAD_STRAGGLER_TIMEOUT=3  # ample for the others: this model loads in milliseconds
for world in "2 1 dp" "4 2 dp" "4 1 own"; do
  read -r size victim layout <<<"$world"
  tag=hung$size$victim$layout
  started=$(date +%s)
  start "$size" "$tag" "$layout" "$victim" stop
  for ((r = 0; r < size; r++)); do ((r == victim)) || finish "$tag" $r 30; done
  for ((r = 0; r < size; r++)); do
    ((r == victim)) || expect "$tag" $r fail "rank $victim" "straggler_timeout"
  done
  # Resumed after its world gave up, the hung rank must fail too.
  kill -CONT "${pids[$victim]}"
  started=$(date +%s)
  finish "$tag" "$victim" 30
  # It fails where it meets the gone world first: rank 0's rendezvous, or a peer's Gloo
  # connection (it was sending what it had read); either way naming the rank.
  expect "$tag" "$victim" fail "stage:"
  grep -qE "rank 0|(sending to|receiving from) rank [0-9]+ through Gloo" "$dir/$tag.$victim.err" ||
    { echo "$tag: the resumed rank does not name the rank it lost"; cat "$dir/$tag.$victim.err"; exit 1; }
  echo "rank $victim of $size hung ($layout): the others gave up after the straggler timeout, naming it; resumed, it failed too"
done
unset QLOAD_STRAGGLER_TIMEOUT

# 4. MASTER_PORT taken by another program (listening, never answering).
export QLOAD_RENDEZVOUS_TIMEOUT=3
port=$(free_port)
python3 -c "
import socket, sys, time
s = socket.socket(); s.bind(('127.0.0.1', $port)); s.listen(8)
open(sys.argv[1], 'w').close()
time.sleep(60)" "$dir/squatting" &
squatter=$!
while [[ ! -e $dir/squatting ]]; do sleep 0.05; done
started=$(date +%s)
export MASTER_PORT=$port
pids=()
for r in 0 1; do launch taken 2 $r dp none; done
for r in 0 1; do finish taken $r 30; expect taken $r fail; done
expect taken 0 fail "127.0.0.1:$port"
kill "$squatter"
wait "$squatter" 2>/dev/null || true
echo "MASTER_PORT in use: both ranks failed within $(($(date +%s) - started)) s"

# 5. A stranger's hello to rank 0 before rank 1 joins: dropped and logged, the load goes on.
fresh_world 30
launch stranger 2 0 dp none
python3 - "$MASTER_PORT" <<'PY'
import socket, sys, time
deadline = time.time() + 20
while True:
    try:
        s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
        break
    except OSError:
        if time.time() > deadline: raise
        time.sleep(0.05)
s.sendall(b"hello, I am rank 1!!")  # 20 bytes, then silence until rank 0 drops it
s.settimeout(20)
assert s.recv(4096) is not None
PY
launch stranger 2 1 dp none
for r in 0 1; do finish stranger $r 60; expect stranger $r 0 "rank $r: $tensors tensors"; done
expect stranger 0 0 "dropped"
echo "a stranger's connection was dropped and logged; both ranks loaded"

# A rank with another token: refused, and neither rank exits 0.
fresh_world 3
for r in 0 1; do QLOAD_WORLD_TOKEN="token of rank $r, long enough!" launch token 2 $r dp none; done
for r in 0 1; do finish token $r 30; expect token $r fail; done
expect token 0 fail "connections dropped, as logged"
expect token 1 fail "did not accept this rank's token"
# Rank 1 retried for the whole timeout; rank 0 logged that once.
[[ $(grep -c "dropped a connection" "$dir/token.0.err") == 1 ]] || { echo "rank 0 logged every retry"; cat "$dir/token.0.err"; exit 1; }
echo "ranks with different tokens: both failed within $(($(date +%s) - started)) s, saying why"
pids=()

# 6. Started alone with a bad request: its own error at once and at the end, notices between.
fresh_world 3
rc=0
WORLD_SIZE=2 RANK=0 "$qload" load "$dir/m" >"$dir/alone.out" 2>"$dir/alone.err" || rc=$?
((rc != 0 && $(date +%s) - started <= 10)) || { echo "alone: rc $rc after $(($(date +%s) - started)) s"; exit 1; }
head -1 "$dir/alone.err" | grep -q "rank 0 of 2 cannot load: .*no parallel layout.*waiting up to 3 s" &&
  grep -q "rank 0 has waited [0-9]* s on .* and 1 of 2 ranks joined" "$dir/alone.err" &&
  tail -1 "$dir/alone.err" | grep -q "error: .*no parallel layout" ||
  { echo "alone: it did not say why, or while waiting"; cat "$dir/alone.err"; exit 1; }
echo "started alone with no layout: said why at once, while waiting, and at the end ($rc)"

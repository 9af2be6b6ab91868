#!/usr/bin/env bash
# Lockfiles end to end: `qload lock` records a recipe's load; `qload load --locked` (or the
# recipe's `verify`) and `qload verify` pass on the same files, also copied elsewhere, and
# fail, naming what differs and exposing nothing, when a tensor byte, the recipe, a helper
# module, the plan or the set of files changes. Usage: lock.sh QLOAD
source "$(dirname "${BASH_SOURCE[0]}")/clean_env.sh"  # only the QLOAD_* variables this test sets
set -euo pipefail
qload=$1
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
cd "$dir"
"$qload" synth m --layers 2 --hidden 128 --intermediate 256 --vocab 300 --shards 2 --seed 3 >/dev/null
mkdir lib
echo 'return { dtype = "f32" }' > lib/settings.lua
cat > r.lua <<'LUA'
local settings = require("lib.settings")
return qload.recipe { source = "m", devices = { "cpu", "cpu:1" }, parallel = { pipeline = 2 }, dtype = settings.dtype }
LUA
expect_fail() {  # expect_fail RC TEXT CMD...: the command exits RC and says TEXT
  local rc=$1 text=$2; shift 2
  set +e; out=$("$@" 2>&1); got=$?; set -e
  [ "$got" -eq "$rc" ] && [[ "$out" == *"$text"* ]] || { echo "expected exit $rc with '$text' from: $*"; echo "got $got: $out"; exit 1; }
}

# Same recipe, same files: same plan hash, twice.
[ "$("$qload" plan r.lua | tail -1)" = "$("$qload" plan r.lua | tail -1)" ] || { echo "plan is not deterministic"; exit 1; }
"$qload" lock r.lua -o r.lock | grep -q "locked 2 files"
python3 - <<'PY'
import json
lock = json.load(open("r.lock"))
assert lock["schema"] == "qload.lock/1" and lock["recipe"] == "r.lua", lock
assert len(lock["files"]) == 2 and all(len(f["xxh3_128"]) == 32 for f in lock["files"])
assert len(lock["tensors"]) == 21 and len(lock["recipe_xxh3_64"]) == 16 and len(lock["plan_xxh3_64"]) == 16
assert not any(f["path"].startswith("/") for f in lock["files"]), "paths must be relative to the checkpoint"
PY
"$qload" load r.lua --locked r.lock | grep -q "qload: loaded"
"$qload" verify r.lua --lock r.lock | grep -q "verified 2 files"
# The lock's digests equal xxhsum's and qload hash's view of the same files.
"$qload" hash --json m | python3 -c '
import json, sys
h = json.load(sys.stdin); lock = json.load(open("r.lock"))
assert {t["name"]: t["xxh3_64"] for t in h["tensors"]} == lock["tensors"]
assert [f["xxh3_128"] for f in h["files"]] == [f["xxh3_128"] for f in lock["files"]]'

# The same files in another place still match (paths are relative to the checkpoint).
mkdir elsewhere && cp -r m lib r.lua r.lock elsewhere/
"$qload" load elsewhere/r.lua --locked elsewhere/r.lock | grep -q "qload: loaded"

# A recipe naming the lock in `verify` checks it on every load.
sed 's/dtype = settings.dtype }/dtype = settings.dtype, verify = "r.lock" }/' r.lua > v.lua
"$qload" lock v.lua -o r.lock >/dev/null
"$qload" load v.lua | grep -q "qload: loaded"
expect_fail 64 "contradicts the recipe's verify" "$qload" load v.lua --locked other.lock
"$qload" lock r.lua -o r.lock >/dev/null

# A different plan (another dtype) is refused before anything is read; so is a recipe's load
# against a lock made without one.
"$qload" lock m -o m.lock >/dev/null
"$qload" load m --locked m.lock >/dev/null
expect_fail 75 "the plan hashes to" "$qload" load m --locked m.lock --dtype f16
expect_fail 75 "made without a recipe" "$qload" load r.lua --locked m.lock
# An edited recipe, or an edited helper module, is refused.
cp r.lua r.lua.orig; echo "-- a comment" >> r.lua
expect_fail 75 "the recipe hashes to" "$qload" load r.lua --locked r.lock
cp r.lua.orig r.lua
echo 'return { dtype = "f32" } -- edited' > lib/settings.lua
expect_fail 75 "a module it requires" "$qload" load r.lua --locked r.lock
expect_fail 75 "differs from the locked one" "$qload" verify r.lua --lock r.lock
echo 'return { dtype = "f32" }' > lib/settings.lua
"$qload" load r.lua --locked r.lock >/dev/null

# One flipped tensor byte: the load fails naming file, tensor and offset (digests at their
# default, auto: a lock is something to check against); verify names both the file and the
# tensor; nothing is printed as loaded. A lock with digests off is refused, never skipped.
"$qload" lock m --mmap -o mapped.lock >/dev/null  # the mode is part of the plan
python3 - <<'PY'
import struct
f = "m/model-00001-of-00002.safetensors"
b = bytearray(open(f, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
b[8 + n + 100] ^= 1
open(f, "wb").write(b)
PY
expect_fail 75 "tensor 'model.embed_tokens.weight'" "$qload" load r.lua --locked r.lock
set +e; out=$("$qload" load r.lua --locked r.lock 2>/dev/null); set -e
[ -z "$out" ] || { echo "a failed locked load printed: $out"; exit 1; }
expect_fail 75 "tensor 'model.embed_tokens.weight'" "$qload" load m --locked mapped.lock --mmap
expect_fail 64 "digests are off" "$qload" load r.lua --locked r.lock --no-digests
expect_fail 75 "model-00001-of-00002.safetensors" "$qload" verify m --lock r.lock
report=$("$qload" verify m --lock r.lock --json 2>/dev/null || true)
python3 -c '
import json, sys
r = json.loads(sys.argv[1])
assert r["matches"] is False, r
assert any("model.embed_tokens.weight" in d for d in r["differences"]), r' "$report"

# Another checkpoint entirely (more layers): files and tensors differ before any read.
"$qload" synth m3 --layers 3 --hidden 128 --intermediate 256 --vocab 300 --shards 2 --seed 3 >/dev/null
sed 's/source = "m"/source = "m3"/' r.lua > r3.lua
expect_fail 75 "does not match the lock" "$qload" load r3.lua --locked r.lock
expect_fail 75 "is not in the lock" "$qload" verify m3 --lock r.lock

# A malformed lock is bad data naming the lockfile; a missing one is missing input.
echo '{"schema": "qload.lock/1", "qload_version": "0.1.0"}' > bad.lock
expect_fail 65 "bad.lock" "$qload" load r.lua --locked bad.lock
echo 'not json' > bad.lock
expect_fail 65 "not a JSON object (does not start with '{') (file 'bad.lock', offset 0, reading a lockfile)" "$qload" verify m --lock bad.lock
# Not a regular file: refused, never read (a directory) or waited on (a FIFO).
expect_fail 64 "not a regular file" "$qload" verify m --lock .
mkfifo lock.fifo
expect_fail 64 "not a regular file" "$qload" verify m --lock lock.fifo
expect_fail 66 "nope.lock" "$qload" load r.lua --locked nope.lock

# A recipe's trace: written once; a second load is refused before it reads anything, unless
# --overwrite; a path outside the recipe's folder is refused.
echo 'return qload.recipe { source = "m", trace = "t.json" }' > traced.lua
"$qload" load traced.lua > /dev/null
expect_fail 64 "the recipe's trace file exists" "$qload" load traced.lua
"$qload" load traced.lua --overwrite > /dev/null
echo 'return qload.recipe { source = "m", trace = "../t.json" }' > escaping.lua
expect_fail 64 "must be a relative path inside the recipe's folder" "$qload" load escaping.lua
# A recipe applied to a checkpoint (--recipe): the lock records that recipe and that
# checkpoint's files; another checkpoint under the same recipe does not match it.
echo 'return qload.recipe { dtype = "f32" }' > template.lua
"$qload" lock m --recipe template.lua -o t.lock | grep -q "locked 2 files"
python3 -c 'import json; l = json.load(open("t.lock")); assert l["recipe"] == "template.lua" and l["recipe_xxh3_64"], l'
"$qload" load m --recipe template.lua --locked t.lock --json | python3 -c '
import json, sys
r = json.load(sys.stdin)
assert r["tensors"] == 21, r'
"$qload" verify m --recipe template.lua --lock t.lock | grep -q "verified 2 files"
expect_fail 75 "does not match the lock" "$qload" load m3 --recipe template.lua --locked t.lock
expect_fail 64 "contradicts the recipe's F32 (file 'template.lua')" "$qload" load m --recipe template.lua --dtype bf16
expect_fail 64 "source is itself a recipe" "$qload" load r.lua --recipe template.lua
echo "lock: plans are stable; locks pass on the same files anywhere and refuse every change"

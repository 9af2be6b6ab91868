#!/usr/bin/env bash
# The C ABI end to end: a C99 program loads a synthetic checkpoint through libqload.so, reads
# every tensor through DLPack after freeing the model and session, and streams it
# (qload_load_stream) and pulled (qload_stream_next); each list of per-tensor XXH3-64 must equal the checkpoint's (qload hash, itself checked against xxhsum by cli.hash tests).
source "$(dirname "${BASH_SOURCE[0]}")/../cli/clean_env.sh"  # only the QLOAD_* variables this test sets
set -euo pipefail
qload=$1
program=$2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
"$qload" synth "$dir/m" --layers 2 --hidden 128 --intermediate 352 --vocab 300 --heads 4 --kv-heads 2 >/dev/null
"$qload" synth "$dir/q" --layers 1 --hidden 256 --intermediate 512 --vocab 128 --heads 4 --kv-heads 2 --quant gptq4 >/dev/null
# A lock of m, and m2: m with the last byte of its last shard changed (the lock no longer matches
# the last tensor, so a load into destinations fails part way, after others were written).
"$qload" lock "$dir/m" -o "$dir/m.lock" >/dev/null
cp -r "$dir/m" "$dir/m2"
last=$(ls "$dir/m2"/*.safetensors | sort | tail -1)
python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(-1, 2); b = f.read(1); f.seek(-1, 2); f.write(bytes([b[0] ^ 0xFF]))' "$last"
# m again as huggingface_hub caches it: org/m's snapshot of its refs/main, each file a link to
# its blob (named by its sha256, as LFS files are).
commit=0123456789abcdef0123456789abcdef01234567
repo="$dir/hub/models--org--m"
mkdir -p "$repo/blobs" "$repo/refs" "$repo/snapshots/$commit"
for f in "$dir/m"/*; do
  sha=$(sha256sum "$f" | cut -c1-64)
  cp "$f" "$repo/blobs/$sha"
  ln -s "../../blobs/$sha" "$repo/snapshots/$commit/$(basename "$f")"
done
printf %s "$commit" > "$repo/refs/main"
HF_HUB_CACHE="$dir/hub" QLOAD_TEST_HUB_ID=org/m QLOAD_TEST_LOCK="$dir/m.lock" QLOAD_TEST_CHANGED="$dir/m2" \
  QLOAD_TEST_REPORT_OUT="$dir/c_report.json" QLOAD_TEST_INSPECT_OUT="$dir/c_inspect.json" \
  "$program" "$dir/m" "$dir/q" > "$dir/c.txt"
# The session's documents are the same through C as through the CLI: the inspection whole, the
# load report key for key (the CLI adds only its `device` and `peak_rss_bytes`).
"$qload" inspect --json "$dir/q" > "$dir/cli_inspect.json"
"$qload" load "$dir/m" --json > "$dir/cli_report.json"
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
c, cli = json.load(open(f"{d}/c_inspect.json")), json.load(open(f"{d}/cli_inspect.json"))
assert c == cli, "qload_inspect_json and `qload inspect --json` differ"
assert c["schema"] == "qload.inspect/2" and c["quantization"]["logical_tensors"], c["schema"]
c, cli = json.load(open(f"{d}/c_report.json")), json.load(open(f"{d}/cli_report.json"))
assert set(cli) - set(c) == {"device", "peak_rss_bytes"} and set(c) <= set(cli), sorted(set(c) ^ set(cli))
assert c["schema"] == cli["schema"] == "qload.load/2" and c["tensors"] == cli["tensors"] > 0
PY
"$qload" hash --json "$dir/m" | python3 -c '
import json, sys
for t in json.load(sys.stdin)["tensors"]:
    print(t["name"], t["xxh3_64"])' | sort > "$dir/want.txt"
grep -v '^\(stream\|pulled\) ' "$dir/c.txt" | sort > "$dir/got.txt"
grep '^stream ' "$dir/c.txt" | cut -d' ' -f2- | sort > "$dir/streamed.txt"
grep '^pulled ' "$dir/c.txt" | cut -d' ' -f2- | sort > "$dir/pulled.txt"
[ -s "$dir/want.txt" ] || { echo "FAIL: no reference digests"; exit 1; }
diff -u "$dir/want.txt" "$dir/got.txt" || { echo "FAIL: DLPack bytes differ from the checkpoint"; exit 1; }
diff -u "$dir/want.txt" "$dir/streamed.txt" || { echo "FAIL: streamed bytes differ from the checkpoint"; exit 1; }
diff -u "$dir/want.txt" "$dir/pulled.txt" || { echo "FAIL: pulled bytes differ from the checkpoint"; exit 1; }
echo "c abi ok: $(wc -l < "$dir/got.txt") tensors, each also streamed and pulled"

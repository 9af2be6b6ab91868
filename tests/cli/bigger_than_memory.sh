#!/usr/bin/env bash
# A checkpoint bigger than this machine's memory (a sparse file: its holes cost no disk): `qload
# plan` plans it, since a plan allocates nothing and may be made for a bigger machine, and
# `qload load` refuses it as out of memory (exit 70) before allocating or reading anything.
source "$(dirname "${BASH_SOURCE[0]}")/clean_env.sh"  # only the QLOAD_* variables this test sets
set -euo pipefail
qload=$1
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
memory=$(( $(getconf _PHYS_PAGES) * $(getconf PAGESIZE) ))
rows=$(( memory / 8192 / 2 + 65536 ))  # bf16 [rows, 8192]: 1 GiB more than the memory
python3 - "$dir/model.safetensors" "$rows" <<'PY'
import json, struct, sys
path, rows = sys.argv[1], int(sys.argv[2])
size = rows * 8192 * 2
header = json.dumps({"big.weight": {"dtype": "BF16", "shape": [rows, 8192], "data_offsets": [0, size]}}).encode()
header += b" " * (-len(header) % 8)
with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(header)) + header)
    f.truncate(8 + len(header) + size)
PY
out=$("$qload" plan "$dir/model.safetensors" --json) || { echo "FAIL: qload plan refused a checkpoint bigger than memory"; exit 1; }
python3 -c 'import json,sys; p=json.loads(sys.argv[1]); assert [t["name"] for t in p["tensors"]] == ["big.weight"], p["tensors"]' "$out"
set +e
err=$("$qload" load "$dir/model.safetensors" 2>&1 >/dev/null); rc=$?
set -e
[ "$rc" -eq 70 ] || { echo "FAIL: qload load exited $rc, expected 70 (out of memory): $err"; exit 1; }
# The arena holds the tensor's bytes, as a file image: from its file offset modulo 4 KiB, its
# end rounded up to 4 KiB (at most 8 KiB more).
need=$(sed -n 's/.*the host arenas need \([0-9]*\) bytes, more than the '"$memory"' bytes of memory.*/\1/p' <<<"$err")
[ -n "$need" ] && [ "$need" -ge $(( rows * 8192 * 2 )) ] && [ "$need" -le $(( rows * 8192 * 2 + 8192 )) ] \
  || { echo "FAIL: qload load said: $err"; exit 1; }
echo "bigger than memory ok: planned, and its load refused: $err"

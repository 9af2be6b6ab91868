#!/usr/bin/env bash
# The settings table end to end: the three misreadings it fixed (QLOAD_STAGING_BYTES=512MB
# refused, QLOAD_SLOT_BYTES=4MiB alone failing, QLOAD_RENDEZVOUS_TIMEOUT=abc taken as 1 ms),
# precedence default < recipe < environment < flag as `qload config` reports it and a load
# uses it, did-you-mean for unknown variables, and docs/settings.md agreeing with the table.
source "$(dirname "${BASH_SOURCE[0]}")/clean_env.sh"  # only the QLOAD_* variables this test sets
set -euo pipefail
qload=$1
root=$2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
# Big enough (about 15 MB in 1 MiB reads) that the staging budgets below are not cut to its size.
"$qload" synth "$dir/m" --layers 2 --hidden 512 --intermediate 1408 --vocab 1000 --heads 8 --kv-heads 4 >/dev/null

budget() { python3 -c 'import json,sys; print(json.load(sys.stdin)["staging_budget_bytes"])'; }
# within SETTING GOT: the pool holds whole slots (of at most 1 MiB here, sized to the largest
# read), so its capacity is the setting rounded down by less than one slot.
# The staging budgets below are read from loads in the aligned host layout, which stages small
# tensors: a file image reads every tensor straight into place and sizes its pool down to nothing.
export QLOAD_HOST_LAYOUT=aligned
within() { [ "$2" -le "$1" ] && [ "$2" -gt $(($1 - (1 << 20))) ]; }

# 1. Sizes in any unit, and a slot size alone, load.
got=$(QLOAD_STAGING_BYTES=3MB QLOAD_SLOT_BYTES=1MiB "$qload" load "$dir/m" --json | budget)
within 3000000 "$got" || { echo "FAIL: QLOAD_STAGING_BYTES=3MB gave a staging budget of $got"; exit 1; }
QLOAD_STAGING_BYTES=512MB "$qload" load "$dir/m" --json >/dev/null || { echo "FAIL: QLOAD_STAGING_BYTES=512MB"; exit 1; }
QLOAD_SLOT_BYTES=4MiB "$qload" load "$dir/m" --json >/dev/null || { echo "FAIL: QLOAD_SLOT_BYTES=4MiB alone"; exit 1; }

# 2. A bad value is refused, naming the variable (exit 64), for every command that loads.
for cmd in load plan; do
  set +e
  out=$(QLOAD_RENDEZVOUS_TIMEOUT=abc "$qload" $cmd "$dir/m" 2>&1 >/dev/null); rc=$?
  set -e
  [ "$rc" -eq 64 ] || { echo "FAIL: QLOAD_RENDEZVOUS_TIMEOUT=abc qload $cmd exited $rc: $out"; exit 1; }
  [[ "$out" == *"QLOAD_RENDEZVOUS_TIMEOUT=abc: 'abc' is not a duration"* ]] || { echo "FAIL: $out"; exit 1; }
done

# 3. Precedence, as `qload config` reports it and as the load uses it.
cat > "$dir/r.lua" <<'LUA'
return qload.recipe { source = "m", io = { chunk = "1MiB", staging = "2MiB", queue_depth = 4 }, settings = { cpu_workers = 1 } }
LUA
QLOAD_STAGING_BYTES=3MiB QLOAD_IO_DEPTH=6 "$qload" config "$dir/r.lua" --set staging_bytes=4MiB --json > "$dir/config.json"
python3 - "$dir/config.json" <<'PY'
import json, sys
s = {x["name"]: x for x in json.load(open(sys.argv[1]))["settings"]}
def expect(name, value, source, origin):
    got = (s[name]["value"], s[name]["source"], s[name]["from"])
    assert got == (value, source, origin), (name, got)
expect("staging_bytes", "4MiB", "option", "--set staging_bytes")
expect("io_depth", "6", "environment", "QLOAD_IO_DEPTH")
expect("cpu_workers", "1", "recipe", "settings.cpu_workers")
expect("slot_bytes", "1MiB", "recipe", "io.chunk")
expect("digests", "auto", "default", "")
print("config ok")
PY
got=$(QLOAD_STAGING_BYTES=3MiB "$qload" load "$dir/r.lua" --set staging_bytes=4MiB --json | budget)
within $((4 << 20)) "$got" || { echo "FAIL: --set staging_bytes=4MiB over the environment gave $got"; exit 1; }
got=$(QLOAD_STAGING_BYTES=3MiB "$qload" load "$dir/r.lua" --json | budget)
within $((3 << 20)) "$got" || { echo "FAIL: QLOAD_STAGING_BYTES=3MiB over the recipe gave $got"; exit 1; }
got=$("$qload" load "$dir/r.lua" --json | budget)
within $((2 << 20)) "$got" || { echo "FAIL: the recipe's io.staging gave $got"; exit 1; }

# 4. Unknown names: a warning with a did-you-mean for a variable, an error for a flag.
warn=$(QLOAD_SLOT_BYTE=4MiB "$qload" config 2>&1 >/dev/null)
[[ "$warn" == *"QLOAD_SLOT_BYTE is not a qload setting and is ignored (did you mean QLOAD_SLOT_BYTES?)"* ]] \
  || { echo "FAIL: no did-you-mean: $warn"; exit 1; }
set +e
out=$("$qload" load "$dir/m" --set staging_byte=1G 2>&1 >/dev/null); rc=$?
set -e
[ "$rc" -eq 64 ] && [[ "$out" == *"did you mean staging_bytes?"* ]] || { echo "FAIL: --set staging_byte: $rc $out"; exit 1; }

# 5. docs/settings.md holds the table exactly as the code declares it.
sed -n '/<!-- settings-table -->/,/<!-- \/settings-table -->/p' "$root/docs/settings.md" | sed '1d;$d' > "$dir/docs.md"
"$qload" config --markdown > "$dir/code.md"
diff -u "$dir/docs.md" "$dir/code.md" || { echo "FAIL: docs/settings.md and the settings table disagree (regenerate with qload config --markdown)"; exit 1; }
echo "settings ok"

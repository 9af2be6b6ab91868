#!/usr/bin/env bash
# Scale (issue 21): are qload's time and memory linear in tensors, shards and bytes? Writes
# synthetic safetensors checkpoints itself (Python 3 standard library only) at a few sizes each
# and runs `qload plan PATH --json` on every one, plus `qload load PATH --json` on cases a and b
# (case c is only planned, never read):
#   a. one file whose header holds many tiny tensors: full size 1,500,000 tensors of shape [1] F32
#      (names t0000000..., compact JSON, data zeros);
#   b. a sharded checkpoint: model.safetensors.index.json over 100,000 shard files
#      (model-00001-of-100000.safetensors ...) of one [16] F32 tensor each;
#   c. a sparse 200 GB checkpoint: 4 files of 50 GB, each 8 BF16 tensors of [N, 8192] whose data
#      section is a hole (header written, file truncated to full length: no disk space used);
#      its sizes scale the bytes (20, 100, 200 GB) at a constant 32 tensors.
# For every run: wall seconds and peak RSS of the qload process (os.wait4's rusage of that one
# child, forked from a fresh small Python so that the generator's memory does not leak into it;
# that launcher's ~10 MB is the floor of every RSS figure), per-tensor microseconds and RSS bytes,
# and per case and command the ratio (largest size's time / smallest size's time) beside
# (largest / smallest tensors, or bytes for case c), plus the marginal cost per tensor (or per GB) between those two sizes. A command that
# refuses a case (exit status not 0) is recorded in the table with its error line, not fatal.
# Files are reused when already there (a .complete marker per checkpoint); the work dir is
# deleted at the end unless KEEP=1.
#
# Usage: bench/scale_bench.sh [BUILD_DIR] [WORK_DIR]   (defaults: build, /tmp/qload-scale-bench)
# Environment: SCALE (multiplies every full size; default 1, e.g. SCALE=0.1 for a quick run),
# SIZES (fractions of full size; default "0.1 0.5 1"), CASES (default "a b c"),
# TIMEOUT (seconds per qload run, default 900), KEEP=1 (keep the work dir and its checkpoints).
# plan's JSON (one entry per tensor) goes to /dev/null; load's summary JSON is parsed for its own
# "seconds" and "peak_rss_bytes", shown beside the outside measurement.
set -euo pipefail
build=${1:-build}
work=${2:-/tmp/qload-scale-bench}
qload="$build/qload"
[[ -x "$qload" ]] || { echo "no qload binary at $qload" >&2; exit 1; }
mkdir -p "$work"
echo "== $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg); SCALE=${SCALE:-1} SIZES=\"${SIZES:-0.1 0.5 1}\" CASES=\"${CASES:-a b c}\""
status=0
SCALE=${SCALE:-1} SIZES=${SIZES:-0.1 0.5 1} CASES=${CASES:-a b c} TIMEOUT=${TIMEOUT:-900} \
  python3 - "$qload" "$work" <<'PY' || status=$?
import json, os, struct, subprocess, sys, time

qload, work = sys.argv[1], sys.argv[2]
scale = float(os.environ["SCALE"])
fractions = [float(x) for x in os.environ["SIZES"].split()]
cases = os.environ["CASES"].split()
timeout = float(os.environ["TIMEOUT"])

FULL_A_TENSORS = 1_500_000
FULL_B_SHARDS = 100_000
FULL_C_BYTES = 200 * 10**9
C_FILES, C_TENSORS_PER_FILE, C_COLS = 4, 8, 8192

def header_bytes(entries, metadata):
    """Compact JSON header padded with spaces to a multiple of 8, with its length prefix."""
    body = "{" + ",".join(entries) + ',"__metadata__":' + json.dumps(metadata, separators=(",", ":")) + "}"
    raw = body.encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw

def tensor_entry(name, dtype, shape, begin, end):
    return '"%s":{"dtype":"%s","shape":[%s],"data_offsets":[%d,%d]}' % (
        name, dtype, ",".join(str(d) for d in shape), begin, end)

def done(path):
    return os.path.exists(os.path.join(path, ".complete"))

def mark(path, info):
    with open(os.path.join(path, ".complete"), "w") as f:
        json.dump(info, f)

def info_of(path):
    with open(os.path.join(path, ".complete")) as f:
        return json.load(f)

def make_a(n):
    d = os.path.join(work, "a-%d" % n)
    if done(d):
        return info_of(d)
    os.makedirs(d, exist_ok=True)
    entries = [tensor_entry("t%07d" % i, "F32", (1,), 4 * i, 4 * i + 4) for i in range(n)]
    head = header_bytes(entries, {"format": "pt", "bench": "scale-a"})
    del entries
    path = os.path.join(d, "model.safetensors")
    with open(path, "wb") as f:
        f.write(head)
        f.write(bytes(4 * n))
    info = {"path": path, "tensors": n, "files": 1, "data": 4 * n, "header": len(head)}
    mark(d, info)
    return info

def make_b(shards):
    d = os.path.join(work, "b-%d" % shards)
    if done(d):
        return info_of(d)
    os.makedirs(d, exist_ok=True)
    weight_map, hdr_total, elems = {}, 0, 16
    data = bytes(4 * elems)
    for i in range(shards):
        fname = "model-%05d-of-%05d.safetensors" % (i + 1, shards)
        name = "layers.%d.weight" % i
        head = header_bytes([tensor_entry(name, "F32", (elems,), 0, 4 * elems)], {"format": "pt"})
        hdr_total += len(head)
        with open(os.path.join(d, fname), "wb") as f:
            f.write(head)
            f.write(data)
        weight_map[name] = fname
    index = json.dumps({"metadata": {"total_size": 4 * elems * shards}, "weight_map": weight_map},
                       separators=(",", ":")).encode()
    path = os.path.join(d, "model.safetensors.index.json")
    with open(path, "wb") as f:
        f.write(index)
    info = {"path": path, "tensors": shards, "files": shards, "data": 4 * elems * shards,
            "header": hdr_total + len(index)}
    mark(d, info)
    return info

def make_c(total_bytes):
    # Rows per tensor so that the 32 bf16 [rows, 8192] tensors come to about total_bytes.
    rows = max(1, total_bytes // (C_FILES * C_TENSORS_PER_FILE * C_COLS * 2))
    d = os.path.join(work, "c-%d" % rows)
    if done(d):
        return info_of(d)
    os.makedirs(d, exist_ok=True)
    weight_map, hdr_total, data_total = {}, 0, 0
    tbytes = rows * C_COLS * 2
    for fi in range(C_FILES):
        fname = "model-%05d-of-%05d.safetensors" % (fi + 1, C_FILES)
        entries = []
        for ti in range(C_TENSORS_PER_FILE):
            name = "layers.%d.weight" % (fi * C_TENSORS_PER_FILE + ti)
            entries.append(tensor_entry(name, "BF16", (rows, C_COLS), ti * tbytes, (ti + 1) * tbytes))
            weight_map[name] = fname
        head = header_bytes(entries, {"format": "pt", "bench": "scale-c-sparse"})
        hdr_total += len(head)
        with open(os.path.join(d, fname), "wb") as f:
            f.write(head)
            f.truncate(len(head) + C_TENSORS_PER_FILE * tbytes)  # a hole: no blocks allocated
        data_total += C_TENSORS_PER_FILE * tbytes
    index = json.dumps({"metadata": {"total_size": data_total}, "weight_map": weight_map},
                       separators=(",", ":")).encode()
    path = os.path.join(d, "model.safetensors.index.json")
    with open(path, "wb") as f:
        f.write(index)
    info = {"path": path, "tensors": C_FILES * C_TENSORS_PER_FILE, "files": C_FILES,
            "data": data_total, "header": hdr_total + len(index)}
    mark(d, info)
    return info

# The measuring process: a fresh, small Python per run. ru_maxrss of a child counts the RSS high
# water of the process it was forked from (Linux keeps it across exec), so qload must not be
# started from this process, which holds the generated headers; the launcher's own ~10 MB is the
# floor of every RSS figure.
MEASURE = r"""
import os, sys, time
timeout, out_path, err_path, cmd = float(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
err = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
t0 = time.monotonic()
pid = os.fork()
if pid == 0:
    os.dup2(out, 1); os.dup2(err, 2)
    try:
        os.execv(cmd[0], cmd)
    finally:
        os._exit(127)
while True:
    p, st, ru = os.wait4(pid, os.WNOHANG)
    if p:
        rc = str(os.waitstatus_to_exitcode(st)); break
    if time.monotonic() - t0 > timeout:
        os.kill(pid, 9); _, st, ru = os.wait4(pid, 0); rc = "timeout"; break
    time.sleep(0.002)
print(time.monotonic() - t0, ru.ru_maxrss * 1024, rc)
"""

def run(cmd, keep_stdout):
    """Wall seconds and peak RSS (bytes) of one qload process, its exit status, stdout file and
    stderr text. plan --json prints every tensor (~0.6 kB each, pretty-printed), so its stdout
    goes to /dev/null rather than to a file of hundreds of MB; load's JSON is a small summary."""
    out_path = os.path.join(work, "last.out") if keep_stdout else os.devnull
    err_path = os.path.join(work, "last.err")
    res = subprocess.run([sys.executable, "-I", "-S", "-c", MEASURE, str(timeout), out_path, err_path] + cmd,
                         stdout=subprocess.PIPE, check=True, text=True).stdout.split()
    secs, rss, rc = float(res[0]), int(res[1]), res[2]
    rc = int(rc) if rc != "timeout" else rc
    with open(err_path, "rb") as f:
        err_text = f.read().decode(errors="replace").strip()
    return secs, rss, rc, out_path, err_text

def gen(case, frac):
    if case == "a":
        return make_a(max(1, round(FULL_A_TENSORS * scale * frac)))
    if case == "b":
        return make_b(max(1, round(FULL_B_SHARDS * scale * frac)))
    return make_c(int(FULL_C_BYTES * scale * frac))

rows = []
for case in cases:
    for frac in fractions:
        t0 = time.monotonic()
        info = gen(case, frac)
        print("-- case %s x%g: %d tensors, %d files, %d data bytes, %d header bytes (ready in %.1f s)"
              % (case, frac, info["tensors"], info["files"], info["data"], info["header"],
                 time.monotonic() - t0), flush=True)
        commands = ["plan"] + (["load"] if case in ("a", "b") else [])
        for command in commands:
            secs, rss, rc, out_path, err = run([qload, command, info["path"], "--json"], command == "load")
            note = "ok"
            reported = ""
            if rc != 0:
                lines = [l for l in err.splitlines() if l.strip()]
                note = "exit %s: %s" % (rc, lines[-1] if lines else "(no message)")
            elif command == "load":
                try:
                    with open(out_path) as f:
                        j = json.load(f)
                    reported = "%.3f s, %.0f MiB" % (j["seconds"], j["peak_rss_bytes"] / 2**20)
                except Exception as e:  # a finding, not a failure of the benchmark
                    note = "ok, but its JSON did not parse: %s" % e
            print("   %s: %.3f s, peak RSS %.0f MiB, %s%s" % (command, secs, rss / 2**20, note,
                  (" (qload's own: %s)" % reported) if reported else ""), flush=True)
            rows.append(dict(case=case, frac=frac, command=command, secs=secs, rss=rss, note=note,
                             reported=reported, **info))

def fmt_bytes(n):
    for unit, div in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= div:
            return "%.1f %s" % (n / div, unit)
    return "%d B" % n

print()
print("| case | size | tensors | files | data bytes | header bytes | command | seconds | peak RSS | µs/tensor | RSS B/tensor | qload's own (s, RSS) | result |")
print("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|---|")
for r in rows:
    ok = r["note"].startswith("ok")
    print("| %s | %g | %d | %d | %s | %s | %s | %.3f | %.0f MiB | %s | %s | %s | %s |" % (
        r["case"], r["frac"], r["tensors"], r["files"], fmt_bytes(r["data"]), fmt_bytes(r["header"]),
        r["command"], r["secs"], r["rss"] / 2**20,
        "%.2f" % (r["secs"] / r["tensors"] * 1e6) if ok else "",
        "%.0f" % (r["rss"] / r["tensors"]) if ok else "",
        r["reported"], r["note"].replace("|", "\\|")))

print()
print("| case | command | sizes compared | size ratio | time ratio | RSS ratio | marginal per step |")
print("|---|---|---|---:|---:|---:|---|")
for case in cases:
    for command in ("plan", "load"):
        ok = [r for r in rows if r["case"] == case and r["command"] == command and r["note"].startswith("ok")]
        if len(ok) < 2:
            if any(r["case"] == case and r["command"] == command for r in rows):
                print("| %s | %s | fewer than two sizes succeeded | | | | |" % (case, command))
            continue
        lo, hi = ok[0], ok[-1]
        if case == "c":
            size_ratio = hi["data"] / lo["data"]
            step = (hi["data"] - lo["data"]) / 1e9
            marginal = "%.2f ms, %.2f MiB per GB" % ((hi["secs"] - lo["secs"]) / step * 1e3,
                                                    (hi["rss"] - lo["rss"]) / step / 2**20) if step else ""
        else:
            size_ratio = hi["tensors"] / lo["tensors"]
            step = hi["tensors"] - lo["tensors"]
            marginal = "%.2f µs, %.0f B per tensor" % ((hi["secs"] - lo["secs"]) / step * 1e6,
                                                     (hi["rss"] - lo["rss"]) / step) if step else ""
        print("| %s | %s | x%g vs x%g | %.1f | %.2f | %.2f | %s |" % (
            case, command, hi["frac"], lo["frac"], size_ratio, hi["secs"] / lo["secs"],
            hi["rss"] / lo["rss"], marginal))
PY
if [[ "${KEEP:-0}" != 1 ]]; then rm -rf "$work"; fi
exit "$status"

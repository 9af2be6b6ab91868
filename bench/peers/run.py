#!/usr/bin/env python3
"""qload against the loaders users would otherwise pick, on the same checkpoint, in one run.

    bench/peers/run.sh [BUILD_DIR] [-- OPTIONS]      (makes the environment, then runs this)

Every load runs in a process of its own (worker.py; the hand-written reader and the qload CLI
are programs of their own), cold (page cache dropped before each run; needs root) and warm
(the loader's files read once just before), for --rounds rounds with the order of the loaders
rotated each round, so that no loader always follows the same neighbour. Before the rounds,
each Python loader loads the checkpoint once more and hashes every tensor's name and bytes: a
loader that hands back other bytes than safetensors' own load_file is reported, not ranked.

MEMORY: on a VM whose balloon driver reports free pages to the host (this project's, and many
clouds'), memory a process frees goes back to the host within seconds, and the next process to
touch that much fresh memory waits for the host to back every page again. On the 2-vCPU VM the
hand-written reader takes 0.63 s warm on 4.4 GB when it starts right after another process
freed that much, and 2.0-3.2 s when it starts 3 s or more later; a Python loader spends seconds
importing torch before it loads, a C++ one starts at once. So that every loader meets the same
memory, --memory chooses one state for all:
  primed (default): just before the clock starts, the loader's own process (the driver, for the
    C++ programs, which start at once) touches and frees the checkpoint's size of fresh memory
    plus 512 MiB, so the load's first touches find pages the host already backs: what a bare
    metal machine, or a VM with its memory reserved (GPU VMs usually are), gives every load;
  settled: the driver waits --settle seconds (default 5) before each load, which then pays the
    host's backing of every page, as a first load on a fresh ballooned VM does.

Prints, per loader and mode: median and best seconds, GB/s of tensor bytes at the median, the
ratio of that to the hand-written reader's GB/s at its median (bench/plain_read.cpp: one
huge-page buffer, one pread thread per core), and the peak RSS of the process. Writes the same
as JSON (--json), a markdown table (--markdown) and an SVG chart (--chart).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from worker import prime_memory, safetensors_files, twin  # beside this file

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "worker.py")

# key: (label, format of the files it reads, what the tensors it hands back live in: "owned"
# memory of the process, or "mapped" page cache of the files, which a warm run only maps and
# which the kernel may drop and read again later). The order is the table's.
LOADERS = {
    "reader": ("hand-written reader (huge-page buffer, pread threads)", "safetensors", "owned"),
    "qload": ("qload CLI `load --device cpu`", "safetensors", "owned"),
    "qload-mmap": ("qload CLI `load --mmap` (every byte hashed)", "safetensors", "mapped"),
    "qload-py": ("qload Python `qload.load` -> torch", "safetensors", "owned"),
    "safetensors-load_file": ("safetensors `load_file` -> torch", "safetensors", "mapped"),
    "safetensors-safe_open": ("safetensors `safe_open` -> torch", "safetensors", "mapped"),
    "fastsafetensors": ("fastsafetensors (CPU, no GDS)", "safetensors", "owned"),
    "runai-streamer": ("Run:ai model streamer", "safetensors", "owned"),
    "tensorizer": ("tensorizer", "tensorizer", "owned"),
    "torch-load-mmap": ("`torch.load(mmap=True, weights_only=True)`", "pt", "mapped"),
    "qload-py-pt": ("qload Python on the same `.pt`", "pt", "owned"),
    "gguf-reader": ("gguf-py `GGUFReader`", "gguf", "mapped"),
    "qload-py-gguf": ("qload Python on the same `.gguf`", "gguf", "owned"),
}
REFERENCE_DIGEST = "safetensors-load_file"


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def files_of(fmt, checkpoint, twins):
    return safetensors_files(checkpoint) if fmt == "safetensors" else [twin(twins, fmt)]


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def read_through(files):
    for path in files:
        with open(path, "rb", buffering=0) as f:
            while f.read(1 << 24):
                pass


def timed_run(key, args, checkpoint, twins, prime):
    """One load; returns {seconds, bytes, rss_bytes}."""
    files = files_of(LOADERS[key][1], checkpoint, twins)
    if key == "reader":
        cmd = [args.reader, "--threads", str(os.cpu_count()), *files]
    elif key in ("qload", "qload-mmap"):
        cmd = [args.qload, "load", checkpoint, "--device", "cpu", "--json"]
        if key == "qload-mmap":
            cmd.append("--mmap")
    else:
        cmd = [sys.executable, WORKER, key, checkpoint, twins, "--prime", str(prime)]
    if key in ("reader", "qload", "qload-mmap"):
        prime_memory(prime)  # these programs start at once: primed here, just before
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{key}: {' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    result = json.loads(proc.stdout)  # one JSON object: the CLI's report, the reader's, the worker's
    # Each program reports its own peak RSS (VmHWM): a forked child's rusage would also count
    # whatever its parent (this driver, which primes memory) had touched before the fork.
    # the CLI says tensor_bytes (session/report.hpp), the reader and the worker bytes
    return {"seconds": result["seconds"], "bytes": result.get("tensor_bytes", result.get("bytes")),
            "rss_bytes": result["peak_rss_bytes"]}


def digest_run(key, checkpoint, twins):
    proc = subprocess.run([sys.executable, WORKER, key, checkpoint, twins, "--digest"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{key} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def available(key):
    if key in ("reader", "qload", "qload-mmap"):
        return True
    return subprocess.run([sys.executable, WORKER, "--probe", key], capture_output=True).returncode == 0


def summarize(runs, reader_gbps):
    seconds = [r["seconds"] for r in runs]
    median = statistics.median(seconds)
    gbps = runs[0]["bytes"] / median / 1e9
    return {
        "median_seconds": median,
        "best_seconds": min(seconds),
        "gbps": gbps,
        "ratio_to_reader": gbps / reader_gbps if reader_gbps else None,
        "peak_rss_bytes": max(r["rss_bytes"] for r in runs),
        "seconds": seconds,
    }


def markdown(results, modes, checkpoint_bytes, rounds, machine):
    lines = [
        f"{checkpoint_bytes / 1e9:.2f} GB of tensors; {machine}; median of {rounds} rounds (best in brackets); "
        "ratio: GB/s over the hand-written reader's GB/s at its median, in the same mode.",
        "",
        "| loader | format | memory | " + " | ".join(f"{m} s | {m} GB/s | {m} ratio" for m in modes) + " | peak RSS MiB | same bytes |",
        "|---|---|---|" + "---:|---:|---:|" * len(modes) + "---:|---|",
    ]
    for key, r in results.items():
        cells = []
        for m in modes:
            s = r["modes"].get(m)
            if s is None:
                cells += ["-", "-", "-"]
                continue
            cells += [f"{s['median_seconds']:.2f} ({s['best_seconds']:.2f})", f"{s['gbps']:.2f}",
                      f"{s['ratio_to_reader']:.2f}x"]
        rss = max(s["peak_rss_bytes"] for s in r["modes"].values()) / 2**20
        lines.append(f"| {r['label']} | {r['format']} | {r['memory']} | " + " | ".join(cells) + f" | {rss:.0f} | {r['same_bytes']} |")
    return "\n".join(lines) + "\n"


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--qload", default="build/qload")
    ap.add_argument("--reader", default="build/bench/qload_plain_read")
    ap.add_argument("--work", default="/tmp/qload-peers", help="checkpoint and its twins are made and kept here")
    ap.add_argument("--checkpoint", help="a safetensors checkpoint directory (default: synthesize one into --work)")
    ap.add_argument("--layers", type=int, default=20, help="layers of the synthesized llama (20: 4.4 GB of bf16)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--modes", default="cold,warm")
    ap.add_argument("--loaders", default=",".join(LOADERS), help="comma-separated keys: " + ", ".join(LOADERS))
    ap.add_argument("--json", help="write every reading here")
    ap.add_argument("--markdown", help="write the table here")
    ap.add_argument("--chart", help="draw an SVG chart here (matplotlib)")
    ap.add_argument("--memory", choices=("primed", "settled"), default="primed",
                    help="the state of fresh memory each load meets (MEMORY in the docstring)")
    ap.add_argument("--settle", type=float, default=5.0, help="seconds to wait before each load with --memory settled")
    ap.add_argument("--machine", default=f"{os.cpu_count()} CPUs", help="what to call this machine in the table")
    return ap.parse_args()


def modes_and_checkpoint(args):
    """The modes this machine can measure (cold needs to drop the page cache) and the checkpoint,
    synthesized into --work when none is given."""
    modes = args.modes.split(",")
    if "cold" in modes:
        try:
            drop_caches()
        except OSError as e:
            log(f"peers: cannot drop the page cache ({e}); measuring warm only")
            modes = [m for m in modes if m != "cold"]
    checkpoint = args.checkpoint or os.path.join(args.work, "model")
    twins = os.path.join(args.work, "twins")
    if not os.path.exists(os.path.join(checkpoint, "config.json")) and not args.checkpoint:
        log(f"peers: synthesizing the checkpoint into {checkpoint}")
        subprocess.run([args.qload, "synth", checkpoint, "--layers", str(args.layers), "--hidden", "3072",
                        "--intermediate", "8192", "--vocab", "32000", "--heads", "24", "--kv-heads", "8",
                        "--shards", "4", "--dtype", "bf16"], check=True, stdout=subprocess.DEVNULL)
    return modes, checkpoint, twins


def loaders_here(args, checkpoint, twins):
    """The loaders asked for that are installed (the hand-written reader always), with the
    checkpoint written in every other format they read."""
    keys = [k for k in args.loaders.split(",") if k]
    for k in keys:
        if k not in LOADERS:
            raise SystemExit(f"peers: unknown loader {k}; known: {', '.join(LOADERS)}")
    missing = [k for k in keys if not available(k)]
    for k in missing:
        log(f"peers: {k} is not installed here; left out")
    keys = [k for k in keys if k not in missing]
    if "reader" not in keys:
        keys.insert(0, "reader")
    formats = sorted({LOADERS[k][1] for k in keys} - {"safetensors"})
    if formats:
        log(f"peers: writing the checkpoint as {', '.join(formats)} (once; kept in {twins})")
        subprocess.run([sys.executable, WORKER, "--make-twins", checkpoint, twins, *formats], check=True)
    return keys


def same_bytes_check(keys, checkpoint, twins):
    """A function naming, for each loader, whether the bytes it handed back are safetensors' own
    (every Python loader hashes what it handed back)."""
    digests = {}
    for k in keys:
        if k in ("reader", "qload", "qload-mmap"):
            continue
        digests[k] = digest_run(k, checkpoint, twins)
        log(f"peers: {k}: {digests[k]['tensors']} tensors, {digests[k]['bytes']} bytes, digest {digests[k]['digest'][:16]}")
    reference = digests.get(REFERENCE_DIGEST) or next(iter(digests.values()), None)

    def same_bytes(k):
        if k == "reader":
            return "n/a (raw files)"
        if k in ("qload", "qload-mmap"):
            return "n/a (keeps nothing; same library as qload.load)"
        if reference is None:
            return "?"
        return "yes" if digests[k]["digest"] == reference["digest"] else "**no**"

    return same_bytes


def measure(args, keys, modes, checkpoint, twins):
    """Every loader's readings, per mode, over alternating rounds (the order rotated each round)."""
    checkpoint_bytes = sum(os.path.getsize(f) for f in files_of("safetensors", checkpoint, twins))
    prime = checkpoint_bytes + (512 << 20) if args.memory == "primed" else 0
    readings = {k: {m: [] for m in modes} for k in keys}
    for r in range(args.rounds):
        order = keys[r % len(keys):] + keys[: r % len(keys)]
        for m in modes:
            for k in order:
                files = files_of(LOADERS[k][1], checkpoint, twins)
                if m == "cold":
                    drop_caches()
                else:
                    read_through(files)
                if args.memory == "settled":
                    time.sleep(args.settle)
                reading = timed_run(k, args, checkpoint, twins, prime)
                readings[k][m].append(reading)
                log(f"peers: round {r + 1} {m:4} {k:24} {reading['seconds']:7.3f} s  "
                    f"{reading['bytes'] / reading['seconds'] / 1e9:6.2f} GB/s  rss {reading['rss_bytes'] / 2**20:6.0f} MiB")
    return readings, checkpoint_bytes


def main():
    args = parse_args()
    modes, checkpoint, twins = modes_and_checkpoint(args)
    keys = loaders_here(args, checkpoint, twins)
    same_bytes = same_bytes_check(keys, checkpoint, twins)
    readings, checkpoint_bytes = measure(args, keys, modes, checkpoint, twins)
    results = {}
    reader = {m: summarize(readings["reader"][m], None) for m in modes}
    for k in keys:
        label, fmt, memory = LOADERS[k]
        results[k] = {"label": label, "format": fmt, "memory": memory, "same_bytes": same_bytes(k),
                      "modes": {m: summarize(readings[k][m], reader[m]["gbps"]) for m in modes}}
    tensor_bytes = readings["qload"][modes[0]][0]["bytes"] if "qload" in readings else checkpoint_bytes
    machine = f"{args.machine}, memory {args.memory}"
    table = markdown(results, modes, tensor_bytes, args.rounds, machine)
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"modes": modes, "rounds": args.rounds, "machine": machine, "results": results}, f, indent=1)
    if args.chart:
        from chart import draw  # beside this file; imports matplotlib only when asked

        draw(results, modes, args.chart, f"{tensor_bytes / 1e9:.1f} GB, {machine}")
    wrong = [k for k in keys if results[k]["same_bytes"] == "**no**"]
    if wrong:
        log(f"peers: {', '.join(wrong)} handed back other bytes than {REFERENCE_DIGEST}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""qload's Python package against safetensors on the same warm files, in one run.

    PYTHONPATH=build/python python bench/python_load_bench.py [CHECKPOINT_DIR]

Prints, best of --rounds (each after reading the files once so the page cache is warm):
  - qload.load(dir, framework="np") vs safetensors.numpy.load_file over every shard: GB/s and
    the ratio (goal: >= 1.0);
  - qload.stream: seconds to the first tensor vs the whole stream (how much earlier a server
    can start using weights).
With no directory, synthesizes a llama-shaped bf16 checkpoint (~0.9 GB) with the qload CLI
(--qload, default build/qload), in f16: safetensors.numpy cannot read bf16 into numpy.
Where torch imports (the python.clients environment), it also compares
qload.load(framework="pt") with safetensors.torch.load_file.

Every load is timed until one byte of every 4 KiB page of every tensor has been read:
safetensors.torch.load_file maps the file and returns at once (3 ms for a GB), reading pages
only when they are touched, so its return alone says nothing about bytes delivered.
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile
import time


def warm(files):
    for f in files:
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass


def touch_all(tensors) -> int:
    """Reads one byte of every 4 KiB page of every tensor (numpy arrays or torch tensors)."""
    total = 0
    for t in tensors.values():
        if hasattr(t, "numpy"):  # torch
            import torch

            flat = t.reshape(-1).view(torch.uint8)
            total += int(flat[::4096].sum()) if flat.numel() else 0
        else:
            flat = t.reshape(-1).view("uint8")
            total += int(flat[::4096].sum()) if flat.size else 0
    return total


def best(fn, rounds, files):
    times = []
    for _ in range(rounds):
        warm(files)
        t0 = time.perf_counter()
        result = fn()
        if isinstance(result, dict):
            touch_all(result)
        times.append(time.perf_counter() - t0)
    return min(times), times


def checkpoint_of(args):
    """(folder, its safetensors files, a TemporaryDirectory to keep alive or None): the one given,
    or a synthesized f16 llama."""
    if args.checkpoint is not None:
        files = sorted(glob.glob(os.path.join(args.checkpoint, "*.safetensors"))) or [args.checkpoint]
        return args.checkpoint, files, None
    tmp = tempfile.TemporaryDirectory(prefix="qload-pybench-")
    ckpt = os.path.join(tmp.name, "model")
    subprocess.run([args.qload, "synth", ckpt, "--layers", str(args.layers), "--hidden", "2048",
                    "--intermediate", "5632", "--vocab", "32000", "--heads", "16", "--kv-heads", "4",
                    "--shards", "2", "--dtype", "f16"], check=True, stdout=subprocess.DEVNULL)
    return ckpt, sorted(glob.glob(os.path.join(ckpt, "*.safetensors"))), tmp


def torch_rows(ckpt, files, rounds):
    """The torch contenders' rows and best seconds (safetensors.torch, qload reading, qload
    mapping), after checking both give the same tensors; None without torch."""
    import qload

    try:
        import safetensors.torch
        import torch
    except ImportError:
        return None

    def theirs_pt():
        out = {}
        for f in files:
            out.update(safetensors.torch.load_file(f))
        return out

    def ours_pt():
        return qload.load(ckpt, framework="pt", progress=False)

    def ours_pt_mapped():  # zero-copy, as safetensors.torch on cpu
        return qload.load(ckpt, framework="pt", settings={"load_mode": "mmap", "digests": False}, progress=False)

    a, b = ours_pt(), theirs_pt()
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in b), "qload and safetensors.torch disagree"
    del a, b
    s_theirs, r_theirs = best(theirs_pt, rounds, files)
    s_ours, r_ours = best(ours_pt, rounds, files)
    s_mapped, r_mapped = best(ours_pt_mapped, rounds, files)
    rows = [("safetensors.torch.load_file (mmap)", s_theirs, r_theirs), ("qload.load(framework='pt')", s_ours, r_ours),
            ("qload.load(pt, load_mode=mmap)", s_mapped, r_mapped)]
    return rows, s_theirs, s_ours, s_mapped


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", nargs="?")
    ap.add_argument("--qload", default="build/qload")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--layers", type=int, default=8)
    args = ap.parse_args()

    import qload
    import safetensors.numpy

    ckpt, files, _tmp = checkpoint_of(args)
    total = sum(os.path.getsize(f) for f in files)

    def theirs():
        out = {}
        for f in files:
            out.update(safetensors.numpy.load_file(f))
        return out

    def ours():
        return qload.load(ckpt, framework="np", progress=False)

    first = []

    def streamed():
        t0 = time.perf_counter()
        n = 0
        for _name, _tensor in qload.stream(ckpt, framework="np"):
            if n == 0:
                first.append(time.perf_counter() - t0)
            n += 1

    # Cross-check once: same names, same bytes.
    a, b = ours(), theirs()
    assert set(a) == set(b) and all(a[k].tobytes() == b[k].tobytes() for k in b), "qload and safetensors disagree"
    del a, b

    s_theirs, r_theirs = best(theirs, args.rounds, files)
    s_ours, r_ours = best(ours, args.rounds, files)
    s_stream, r_stream = best(streamed, args.rounds, files)
    rows = [("safetensors.numpy.load_file", s_theirs, r_theirs), ("qload.load(framework='np')", s_ours, r_ours),
            ("qload.stream (whole)", s_stream, r_stream)]
    with_torch = torch_rows(ckpt, files, args.rounds)
    if with_torch is not None:
        rows += with_torch[0]
    gb = total / 1e9
    print(f"checkpoint: {gb:.2f} GB in {len(files)} file(s); best of {args.rounds} warm rounds; {os.cpu_count()} cores")
    print(f"{'what':<36} {'s':>7} {'GB/s':>7}  all runs (s)")
    for what, s, runs in rows:
        print(f"{what:<36} {s:7.3f} {gb / s:7.2f}  {' '.join(f'{x:.3f}' for x in runs)}")
    ratio = s_theirs / s_ours
    print(f"qload.load vs safetensors.numpy (both read into owned memory): {ratio:.2f}x  (goal >= 1.0: {'PASS' if ratio >= 1.0 else 'MISS'})")
    if with_torch is not None:
        _, s_theirs_pt, s_ours_pt, s_mapped_pt = with_torch
        ratio_pt = s_theirs_pt / s_mapped_pt
        print(f"qload.load(load_mode=mmap) vs safetensors.torch (both map the files): {ratio_pt:.2f}x  "
              f"(goal >= 1.0: {'PASS' if ratio_pt >= 1.0 else 'MISS'})")
        print(f"qload.load (read into owned memory) vs safetensors.torch: {s_theirs_pt / s_ours_pt:.2f}x")
    print(f"qload.stream first tensor after {min(first):.3f} s of {s_stream:.3f} s "
          f"({min(first) / s_stream:.2f} of the whole stream)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

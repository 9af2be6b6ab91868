#!/usr/bin/env python3
"""IBM FMS loading a checkpoint by itself vs through qload, in one run.

    PYTHONPATH=build/python python bench/fms_load_bench.py [MODEL_DIR] [--qload build/qload]

Each load runs in a fresh process (so page cache is the only thing shared, and peak RSS is
that load's own): `fms.models.get_model("hf_pretrained", model_path=...)` in bf16 on cpu, with
FMS's own safetensors loading, then inside `qload.fms.loading()`. Prints seconds (best of
--rounds, warm page cache) and the worst peak RSS of each, and checks that both give the same
logits. With no MODEL_DIR, synthesizes a llama-shaped bf16 checkpoint with `qload synth`.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, resource, sys, time, torch
from fms.models import get_model
path, through_qload = sys.argv[1], sys.argv[2] == "1"
t0 = time.perf_counter()
if through_qload:
    import qload.fms
    qload.fms.install()
model = get_model("hf_pretrained", model_path=path, device_type="cpu", data_type=torch.bfloat16)
seconds = time.perf_counter() - t0
with torch.no_grad():
    logits = model(torch.arange(16).reshape(1, 16))
print(json.dumps({"seconds": seconds, "rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "logits": float(logits.float().abs().sum()), "first": logits.flatten()[:8].float().tolist()}))
"""


def warm(path):
    for f in glob.glob(os.path.join(path, "*.safetensors")):
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass


def run(path, through_qload):
    warm(path)
    out = subprocess.run([sys.executable, "-c", CHILD, path, "1" if through_qload else "0"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?")
    ap.add_argument("--qload", default="build/qload")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--layers", type=int, default=8)
    a = ap.parse_args()
    tmp = None
    path = a.model
    if path is None:
        tmp = tempfile.TemporaryDirectory(prefix="qload-fms-bench-")
        path = os.path.join(tmp.name, "model")
        subprocess.run([a.qload, "synth", path, "--layers", str(a.layers), "--hidden", "2048", "--intermediate", "5632",
                        "--vocab", "32000", "--heads", "16", "--kv-heads", "4", "--shards", "2"], check=True,
                       stdout=subprocess.DEVNULL)
    size = sum(os.path.getsize(f) for f in glob.glob(os.path.join(path, "*.safetensors")))
    results = {False: [], True: []}
    for _ in range(a.rounds):
        for through_qload in (False, True):
            results[through_qload].append(run(path, through_qload))
    fms, ql = results[False], results[True]
    assert all(r["first"] == fms[0]["first"] and r["logits"] == fms[0]["logits"] for r in fms + ql), \
        "FMS and FMS-through-qload gave different logits"
    print(f"checkpoint: {size / 1e9:.2f} GB ({path}); best of {a.rounds} warm rounds, each in a fresh process; "
          f"{os.cpu_count()} cores; logits identical")
    print(f"{'loader':<22} {'get_model s':>11} {'peak RSS MiB':>13}  all runs (s)")
    for name, rs in (("FMS (its own)", fms), ("FMS through qload", ql)):
        print(f"{name:<22} {min(r['seconds'] for r in rs):11.3f} {max(r['rss_kib'] for r in rs) / 1024:13.0f}  "
              + " ".join(f"{r['seconds']:.3f}" for r in rs))
    print(f"time ratio FMS / FMS-through-qload: {min(r['seconds'] for r in fms) / min(r['seconds'] for r in ql):.2f}x")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Real clients to a ready model, by themselves and through qload, in one run.

    PYTHONPATH=build/python python bench/clients_bench.py [MODEL_DIR] [--qload build/qload]
        [--clients fms,transformers,load_file,raw] [--rounds 3]

For each client, the client's own loading against loading through qload, each load in a fresh
process on a warm page cache (rounds alternate; load_file also cold), measured to a ready model in the client's
framework, not to qload's buffers:
  fms           fms.models.get_model("hf_pretrained", ...) in bf16 on --device, by itself / inside
                qload.fms.loading() (checkpoint rows read straight into FMS's parameters)
  transformers  AutoModelForCausalLM.from_pretrained(path, dtype=bf16) / qload.transformers.
                from_pretrained(path)
  load_file     safetensors.torch.load_file / qload.torch.load_file of each file, copied into a
                transformers model's parameters (allocated once, as a server's are); warm and
                cold (the checkpoint's pages dropped with posix_fadvise before each load)
  raw           bench/plain_read (one thread per core, into fresh memory) / qload.load_into into
                torch tensors already faulted in (a server's live parameters): speed only
Prints seconds to the ready model (median of the rounds) and the peak RSS above the process's
baseline (taken after the imports), once the model has run one forward pass (so that every weight
is resident, mapped or not), divided by the model's bytes, and the ratios of qload's to the client's own; checks
that both give identical logits. With no MODEL_DIR, `qload synth` writes a llama-shaped bf16
checkpoint of about 1.65 GB (16 layers, hidden 2048). vLLM's model loader needs a GPU to build a
model with vLLM's CUDA wheel; it is not measured here.
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, os, resource, sys, time
import torch
client, through_qload, path, device = sys.argv[1], sys.argv[2] == "1", sys.argv[3], sys.argv[4]

def rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024

if client == "raw":  # load_into into tensors already faulted in (a server's live parameters)
    import qload
    info = qload.inspect(path)
    by_dtype = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
    dests = {t["name"]: torch.zeros(t["shape"], dtype=by_dtype[t["dtype"]]) for t in info["tensors"]}
    t0 = time.perf_counter()
    qload.load_into(path, dests, progress=False)
    seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "peak_above_kib": 0, "sum": 0.0, "first": []}))
    sys.exit(0)
if client == "load_file":  # safetensors.torch.load_file / qload.torch.load_file, then copied into the model
    import glob
    import safetensors.torch
    import transformers
    import qload.torch
    from accelerate import init_empty_weights
    library = qload.torch if through_qload else safetensors.torch
    def ready():
        with init_empty_weights(include_buffers=False):  # parameters on meta; buffers computed
            model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(path),
                                                                  dtype=torch.bfloat16)
        made = {}  # each parameter allocated once, where it will live (tied ones stay one tensor)
        for name, p in model.named_parameters(remove_duplicate=False):
            owner, _, leaf = name.rpartition(".")
            fresh = made.setdefault(id(p), torch.nn.Parameter(torch.empty_like(p, device="cpu"), requires_grad=False))
            setattr(model.get_submodule(owner), leaf, fresh)
        with torch.no_grad():
            for f in sorted(glob.glob(os.path.join(path, "*.safetensors"))):
                model.load_state_dict(library.load_file(f), strict=False)  # copies into the parameters
        return model.eval()
    def logits(model, tokens):
        return model(tokens).logits
    def warm_up():
        with torch.device("meta"):
            transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(path))
elif client == "fms":
    from fms.models import get_model
    import qload.fms
    def ready():
        if through_qload:
            with qload.fms.loading():
                return get_model("hf_pretrained", model_path=path, device_type=device, data_type=torch.bfloat16)
        return get_model("hf_pretrained", model_path=path, device_type=device, data_type=torch.bfloat16)
    def logits(model, tokens):
        return model(tokens)
    def warm_up():  # the model built once on the meta device: FMS's lazily made modules and caches
        get_model("hf_pretrained", model_path=path, device_type="meta", data_type=torch.bfloat16)
else:
    import transformers
    import qload.transformers
    def ready():
        if through_qload:
            return qload.transformers.from_pretrained(path, dtype=torch.bfloat16, device=device)
        if device == "cpu":
            return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()
        return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, device_map=device).eval()
    def logits(model, tokens):
        return model(tokens).logits
    def warm_up():
        with torch.device("meta"):
            transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(path))
on_gpu = device != "cpu"
if on_gpu:  # the CUDA context made before the baseline, and the allocator's peak counted from here
    torch.zeros(1, device=device)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    device_base = torch.cuda.memory_allocated()
warm_up()  # the client's lazily imported modules, before the baseline
base = rss_kib()
t0 = time.perf_counter()
model = ready()
if on_gpu:
    torch.cuda.synchronize()
seconds = time.perf_counter() - t0
device_peak = torch.cuda.max_memory_allocated() - device_base if on_gpu else 0  # the load's, before any forward
with torch.no_grad():  # a model used once: every weight resident, however it was loaded (mapped or not)
    out = logits(model, torch.arange(16, device=device).reshape(1, 16)).float().cpu()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": seconds, "peak_above_kib": peak - base, "device_peak_bytes": device_peak,
                  "sum": float(out.abs().sum()), "first": out.flatten()[:8].tolist()}))
"""


def warm(path):
    for f in glob.glob(os.path.join(path, "*.safetensors")):
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass


def plain_read(path, binary):
    """bench/plain_read with one thread per core, the hand-written reader: its seconds."""
    files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    out = subprocess.run([binary, "--threads", str(os.cpu_count()), *files], check=True, capture_output=True,
                         text=True).stdout
    return {"seconds": json.loads(out.strip().splitlines()[-1])["seconds"], "peak_above_kib": 0, "sum": 0.0,
            "first": []}


def cool(path):
    """The checkpoint's pages dropped from the page cache (posix_fadvise: no root needed)."""
    for f in glob.glob(os.path.join(path, "*.safetensors")):
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def run(client, path, through_qload, plain_read_binary=None, cold=False, device="cpu"):
    cool(path) if cold else warm(path)
    if client == "raw" and not through_qload:
        return plain_read(path, plain_read_binary)
    out = subprocess.run([sys.executable, "-c", CHILD, client, "1" if through_qload else "0", path, device], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?")
    ap.add_argument("--qload", default="build/qload")
    ap.add_argument("--clients", default="fms,transformers,load_file,raw")
    ap.add_argument("--plain-read", default="build/bench/qload_plain_read")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda:N for fms and transformers (their device peak too)")
    a = ap.parse_args()
    if a.device != "cpu" and set(a.clients.split(",")) - {"fms", "transformers"}:
        ap.error("--device other than cpu: fms and transformers only")
    tmp = None
    path = a.model
    if path is None:
        tmp = tempfile.TemporaryDirectory(prefix="qload-clients-bench-")
        path = os.path.join(tmp.name, "model")
        subprocess.run([a.qload, "synth", path, "--layers", str(a.layers), "--hidden", "2048", "--intermediate", "5632",
                        "--vocab", "32000", "--heads", "16", "--kv-heads", "4", "--shards", "4"], check=True,
                       stdout=subprocess.DEVNULL)
    size = sum(os.path.getsize(f) for f in glob.glob(os.path.join(path, "*.safetensors")))
    print(f"checkpoint: {size / 1e9:.2f} GB ({path}); median of {a.rounds} alternating warm rounds, each load in a "
          f"fresh process; {os.cpu_count()} cores")
    print(f"{'client':<14} {'loading':<14} {'seconds':>8} {'peak/model':>11} {'device peak':>11}  runs (s)")
    for client in a.clients.split(","):
        # load_file cold as well: the page cache dropped before each of its loads
        for cold in (False, True) if client == "load_file" else (False,):
            report(client, cold, [[run(client, path, through_qload, a.plain_read, cold, a.device)
                                   for through_qload in (False, True)]
                                  for _ in range(a.rounds)], size)


def report(client, cold, rounds, size):
    """Prints one client's medians and its ratios; `rounds`: [own, through qload] per round."""
    results = {False: [r[0] for r in rounds], True: [r[1] for r in rounds]}
    everything = results[False] + results[True]
    assert all(r["first"] == everything[0]["first"] and r["sum"] == everything[0]["sum"] for r in everything), \
        f"{client}: its own loading and qload's gave different logits"
    name = f"{client} cold" if cold else client
    labels = {"raw": ("plain_read", "load_into"), "load_file": ("safetensors", "qload.torch")}.get(
        client, ("its own", "through qload"))
    medians = {}
    for through_qload in (False, True):
        rs = results[through_qload]
        seconds = statistics.median(r["seconds"] for r in rs)
        peak = max(r["peak_above_kib"] for r in rs) * 1024 / size
        device_peak = max(r.get("device_peak_bytes", 0) for r in rs) / size  # 0: a cpu load
        medians[through_qload] = (seconds, peak, device_peak)
        print(f"{name:<14} {labels[through_qload]:<14} {seconds:8.3f} {peak:10.2f}x {device_peak:10.2f}x  "
              + " ".join(f"{r['seconds']:.3f}" for r in rs))
    if client == "raw":
        print(f"{name:<14} load_into into faulted-in tensors: {medians[False][0] / medians[True][0]:.2f}x the "
              "speed of the hand-written reader (which pays its first touch)")
        return
    device = f", device peak {medians[True][2]:.2f}x the model (own {medians[False][2]:.2f}x)" if medians[True][2] else ""
    print(f"{name:<14} qload / own: time {medians[True][0] / medians[False][0]:.2f}x, "
          f"peak {medians[True][1] / medians[False][1]:.2f}x{device}; logits identical")

if __name__ == "__main__":
    main()

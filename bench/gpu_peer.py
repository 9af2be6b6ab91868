#!/usr/bin/env python3
"""One load of a safetensors checkpoint by one of qload's peers, in a process of its own
(bench/gpu_load_bench.sh starts one per run, so that each has a clean heap, the page cache as
the bench left it, and an honest peak RSS).

    gpu_peer.py PEER DEVICE [FILE...]

PEER: safetensors (`safe_open(..., device=DEVICE)`, every tensor of every file),
fastsafetensors (SafeTensorsFileLoader, nogds) or runai (the Run:ai model streamer, streaming to
host memory, each tensor then copied to DEVICE: what vLLM's runai_streamer load format does).
Also qload itself through its Python package, timed the same way (a process whose CUDA context is
already up, as an inference server's is; the CLI's own figure counts the context's start):
qload (`qload.load(dir, device=DEVICE)`) and qload_into (`qload.load_into` into tensors torch
allocates on DEVICE inside the timed region, as a server's parameters are).
With no FILE it only checks that the peer can be used (exit 0, or 3 saying why). DEVICE is
"cuda:N", or "cpu" to try a peer's code where there is no GPU.

Prints one JSON object: seconds (from the first call of the load until every tensor is on the
device, CUDA synchronised; after the imports and the CUDA context are up), tensors, bytes,
peak_rss_bytes.
"""
import json
import resource
import sys
import time


def usable(peer, device):
    """Imports what the peer needs; raises whatever makes it unusable here."""
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device")
    if peer == "safetensors":
        import safetensors  # noqa: F401
    elif peer == "fastsafetensors":
        import fastsafetensors  # noqa: F401
    elif peer == "runai":
        import runai_model_streamer  # noqa: F401
    elif peer in ("qload", "qload_into"):
        import qload  # noqa: F401
    else:
        raise ValueError(f"unknown peer {peer!r} (safetensors, fastsafetensors, runai, qload, qload_into)")


def synchronize(device):
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def load_safetensors(files, device):
    from safetensors import safe_open

    tensors = []
    for path in files:
        with safe_open(path, framework="pt", device=device) as f:
            for k in f.keys():
                tensors.append(f.get_tensor(k))
    return tensors, []


def load_fastsafetensors(files, device):
    import torch
    from fastsafetensors import SafeTensorsFileLoader

    try:
        from fastsafetensors import SingleGroup

        group = SingleGroup()
    except ImportError:
        group = None  # newer releases take None for a single process
    # Releases differ: older ones take a torch.device, newer ones a string.
    try:
        loader = SafeTensorsFileLoader(group, device, nogds=True)
    except (AttributeError, TypeError):
        loader = SafeTensorsFileLoader(group, torch.device(device), nogds=True)
    loader.add_filenames({0: list(files)})
    fb = loader.copy_files_to_device()
    keys = list(loader.get_keys()) if hasattr(loader, "get_keys") else list(fb.key_to_rank_lidx.keys())
    return [fb.get_tensor(k) for k in keys], [fb, loader]


def load_runai(files, device):
    from runai_model_streamer import SafetensorsStreamer

    tensors = []
    with SafetensorsStreamer() as streamer:
        # Views into the streamer's reused buffers (owned=False): each is copied to the device
        # before the next one is taken, as vLLM's weight loading does.
        streamer.stream_files(list(files), owned=False)
        for _, tensor in streamer.get_tensors():
            tensors.append(tensor.to(device) if device != "cpu" else tensor.clone())
    return tensors, []


def checkpoint_dir(files):
    import os

    dirs = {os.path.dirname(os.path.abspath(f)) for f in files}
    if len(dirs) != 1:
        raise SystemExit(f"qload peers load one checkpoint directory; these files are in {len(dirs)}")
    return dirs.pop()


def load_qload(files, device):
    import qload

    model = qload.load(checkpoint_dir(files), device=device, progress=False)
    return list(model.values()), []


def load_qload_into(files, device):
    import torch

    import qload

    path = checkpoint_dir(files)
    by_dtype = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
    dests = {t["name"]: torch.empty(t["shape"], dtype=by_dtype[t["dtype"]], device=device)
             for t in qload.inspect(path)["tensors"]}
    qload.load_into(path, dests, device=device, progress=False)
    return list(dests.values()), []


LOADERS = {"safetensors": load_safetensors, "fastsafetensors": load_fastsafetensors, "runai": load_runai,
           "qload": load_qload, "qload_into": load_qload_into}


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    peer, device, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    try:
        usable(peer, device)
    except Exception as e:  # anything that makes the peer unusable here, not a failed load
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(3)
    if not files:  # availability check only
        return
    import torch

    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
        torch.zeros(1, device=device)  # CUDA context up before the clock starts
        torch.cuda.synchronize()
    start = time.perf_counter()
    tensors, owners = LOADERS[peer](files, device)
    synchronize(device)
    seconds = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    print(json.dumps({"seconds": seconds, "tensors": len(tensors), "bytes": nbytes, "peak_rss_bytes": rss}))
    del tensors
    for o in owners:
        o.close()


if __name__ == "__main__":
    main()

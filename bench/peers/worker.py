#!/usr/bin/env python3
"""One load by one loader, in a process of its own (bench/peers/run.py starts one per run).

    worker.py LOADER CHECKPOINT_DIR TWINS_DIR [--digest] [--prime BYTES]
    worker.py --probe LOADER                  exit 0 when the loader's package imports
    worker.py --make-twins CHECKPOINT_DIR TWINS_DIR FORMAT...   (pt, tensorizer, gguf)

Prints one JSON object: seconds (from the call that starts the load until one byte of every
4 KiB page of every tensor has been read: mmap-based loaders return before reading anything,
so their return alone says nothing), tensors, bytes, peak_rss_bytes (the process's VmHWM), and
with --digest an XXH3-128 over every tensor's name and bytes in name order, computed after the
timing, so that the driver can check that every loader hands back the same bytes. Imports
happen before the clock starts: what is timed is the load, not the interpreter. --prime: see
MEMORY in run.py.
"""
import glob
import json
import os
import sys
import time


def prime_memory(nbytes):
    """Touches and frees nbytes of fresh memory (run.py's MEMORY note says why), in a child
    process, so that this process's own peak RSS stays the load's."""
    import ctypes
    import mmap

    if nbytes <= 0:
        return
    pid = os.fork()
    if pid == 0:
        block = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        # Huge pages, as loaders' big buffers get: 4 KiB pages freed here did not make the
        # next load's huge-page faults fast (measured: 2.6-6.3 s, as unprimed; 0.86-1.43 s so).
        block.madvise(mmap.MADV_HUGEPAGE)
        ctypes.memset(ctypes.addressof(ctypes.c_char.from_buffer(block)), 1, nbytes)
        os._exit(0)
    os.waitpid(pid, 0)


def peak_rss_bytes():
    """This process's own peak resident set (VmHWM), which no child's memory counts toward."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def safetensors_files(checkpoint):
    files = sorted(glob.glob(os.path.join(checkpoint, "*.safetensors")))
    if not files:
        raise SystemExit(f"worker: no .safetensors files in {checkpoint}")
    return files


def twin(twins, fmt):
    return os.path.join(twins, {"pt": "model.pt", "tensorizer": "model.tensors", "gguf": "model.gguf"}[fmt])


# Each loader: (module it needs, function(checkpoint, twins) -> (tensors by name, keep-alive)).
# The keep-alive object holds whatever owns the tensors' memory until the digest is done.


def load_safetensors_load_file(checkpoint, twins):
    from safetensors.torch import load_file

    out = {}
    for f in safetensors_files(checkpoint):
        out.update(load_file(f))
    return out, None


def load_safetensors_safe_open(checkpoint, twins):
    from safetensors import safe_open

    out = {}
    for f in safetensors_files(checkpoint):
        with safe_open(f, framework="pt") as sf:
            for name in sf.keys():
                out[name] = sf.get_tensor(name)
    return out, None


def load_fastsafetensors(checkpoint, twins):
    from fastsafetensors import SafeTensorsFileLoader, SingleGroup

    loader = SafeTensorsFileLoader(SingleGroup(), "cpu", nogds=True)
    loader.add_filenames({0: safetensors_files(checkpoint)})
    buffers = loader.copy_files_to_device()
    out = {name: buffers.get_tensor(name) for name in buffers.key_to_rank_lidx}
    return out, (buffers, loader)  # the tensors point into the loader's buffers


def load_runai(checkpoint, twins):
    from runai_model_streamer import SafetensorsStreamer

    out = {}
    with SafetensorsStreamer() as streamer:
        # owned=True (its default since 0.17): every tensor handed out is the caller's to keep.
        streamer.stream_files(safetensors_files(checkpoint), owned=True)
        for name, tensor in streamer.get_tensors():
            out[name] = tensor
    return out, None


def load_tensorizer(checkpoint, twins):
    from tensorizer import TensorDeserializer

    deserializer = TensorDeserializer(twin(twins, "tensorizer"), device="cpu")
    return dict(deserializer.items()), deserializer


def load_torch_mmap(checkpoint, twins):
    import torch

    return torch.load(twin(twins, "pt"), mmap=True, weights_only=True), None


def load_gguf(checkpoint, twins):
    import gguf

    reader = gguf.GGUFReader(twin(twins, "gguf"))
    return {t.name: t.data for t in reader.tensors}, reader


def qload_loader(fmt):
    def load(checkpoint, twins):
        import qload

        source = checkpoint if fmt == "safetensors" else twin(twins, fmt)
        return qload.load(source, progress=False), None

    return load


LOADERS = {
    "qload-py": ("qload", qload_loader("safetensors")),
    "safetensors-load_file": ("safetensors", load_safetensors_load_file),
    "safetensors-safe_open": ("safetensors", load_safetensors_safe_open),
    "fastsafetensors": ("fastsafetensors", load_fastsafetensors),
    "runai-streamer": ("runai_model_streamer", load_runai),
    "tensorizer": ("tensorizer", load_tensorizer),
    "torch-load-mmap": ("torch", load_torch_mmap),
    "qload-py-pt": ("qload", qload_loader("pt")),
    "gguf-reader": ("gguf", load_gguf),
    "qload-py-gguf": ("qload", qload_loader("gguf")),
}


def as_bytes(tensor):
    """A flat uint8 numpy view of a torch tensor or numpy array, without a copy."""
    if hasattr(tensor, "untyped_storage"):  # torch
        import torch

        return tensor.contiguous().reshape(-1).view(torch.uint8).numpy()
    import numpy as np

    return np.ascontiguousarray(tensor).reshape(-1).view(np.uint8)


def touch(tensors):
    total = 0
    for t in tensors.values():
        flat = as_bytes(t)
        if flat.size:
            total += int(flat[::4096].sum())
    return total


def digest(tensors):
    import xxhash

    h = xxhash.xxh3_128()
    for name in sorted(tensors):
        h.update(name.encode())
        h.update(as_bytes(tensors[name]))
    return h.hexdigest()


def make_twins(checkpoint, twins, formats):
    """Writes the checkpoint's tensors in the other formats some loaders read (untimed)."""
    import torch
    from safetensors.torch import load_file

    os.makedirs(twins, exist_ok=True)
    state = {}
    for f in safetensors_files(checkpoint):
        state.update(load_file(f))
    for fmt in formats:
        path = twin(twins, fmt)
        if os.path.exists(path):
            continue
        partial = path + ".partial"
        if fmt == "pt":
            torch.save(state, partial)
        elif fmt == "tensorizer":
            from tensorizer import TensorSerializer

            serializer = TensorSerializer(partial)
            serializer.write_state_dict(state)
            serializer.close()
        elif fmt == "gguf":
            write_gguf(state, partial)
        os.replace(partial, path)
        print(f"worker: wrote {path}", file=sys.stderr)


def write_gguf(state, path):
    import gguf
    import numpy as np
    import torch

    types = {torch.bfloat16: gguf.GGMLQuantizationType.BF16, torch.float16: gguf.GGMLQuantizationType.F16,
             torch.float32: gguf.GGMLQuantizationType.F32}
    writer = gguf.GGUFWriter(path, arch="llama")
    for name, tensor in state.items():
        raw = tensor.contiguous().view(torch.uint8).numpy() if tensor.dtype == torch.bfloat16 else tensor.numpy()
        if tensor.dtype == torch.bfloat16:
            # gguf-py takes raw bytes with their element type: the shape it records is the
            # tensor's own once the byte shape is divided back by 2 bytes per element.
            raw = raw.reshape(*tensor.shape[:-1], tensor.shape[-1] * 2)
        writer.add_tensor(name, np.ascontiguousarray(raw), raw_dtype=types[tensor.dtype])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main():
    argv = sys.argv[1:]
    if argv[:1] == ["--probe"]:
        module = LOADERS[argv[1]][0]
        __import__(module)
        return 0
    if argv[:1] == ["--make-twins"]:
        make_twins(argv[1], argv[2], argv[3:])
        return 0
    name, checkpoint, twins = argv[:3]
    want_digest = "--digest" in argv[3:]
    prime = int(argv[argv.index("--prime") + 1]) if "--prime" in argv else 0
    module, load = LOADERS[name]
    __import__(module)
    if module not in ("torch", "numpy"):
        try:
            import torch  # noqa: F401  (imported by most loaders; not part of the timing)
        except ImportError:
            pass
    prime_memory(prime)
    start = time.perf_counter()
    tensors, keep = load(checkpoint, twins)
    touch(tensors)
    seconds = time.perf_counter() - start
    result = {"loader": name, "seconds": seconds, "tensors": len(tensors), "peak_rss_bytes": peak_rss_bytes(),
              "bytes": sum(int(as_bytes(t).size) for t in tensors.values())}
    if want_digest:
        result["digest"] = digest(tensors)
    del keep
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Writes the reference safetensors files under tests/formats/data/ with the real Python
safetensors library, plus reference_expected.inc: the tensor table the C++ test
(reference_files_test.cpp) compares qload's parser against.

Run once, by hand, and commit the output; tests never need Python:

    python3 -m venv /tmp/st-venv && /tmp/st-venv/bin/pip install safetensors numpy xxhash
    /tmp/st-venv/bin/python tests/formats/make_reference_files.py

Offsets in the table come from the written files' headers (as parsed by Python's json), the
XXH3-64 digests from the source buffers handed to the writer, so the C++ side checks both
that it reads the same layout and that its offsets point at the bytes that were written.
"""
import json
import os
import struct
import sys

import numpy as np
import safetensors
import xxhash
from safetensors import TensorSpec, serialize
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
RNG = np.random.default_rng(20240601)


def raw(nbytes):
    return RNG.integers(0, 256, size=nbytes, dtype=np.uint8)


def numpy_tensors():
    """Plain dtypes through the numpy front end, odd sizes included so offsets are unaligned."""
    return {
        "model.embed.weight": RNG.standard_normal((4, 3)).astype(np.float32),
        "model.norm.weight": RNG.standard_normal(5).astype(np.float16),
        "model.step": np.array(7, dtype=np.int64),  # rank 0
        "model.mask": RNG.integers(0, 2, size=5).astype(np.bool_),
        "model.bytes": raw(3),  # odd-sized U8: whatever follows is unaligned
        "model.empty": np.zeros((0, 4), dtype=np.int8),  # zero-size
        "model.double": RNG.standard_normal((1, 2)).astype(np.float64),
        "model.complex": (RNG.standard_normal(2) + 1j * RNG.standard_normal(2)).astype(np.complex64),
        "model.u16": RNG.integers(0, 65536, size=3).astype(np.uint16),
        "model.i32": RNG.integers(-1000, 1000, size=(2, 2)).astype(np.int32),
        "model.u64": RNG.integers(0, 2**63, size=1).astype(np.uint64),
        "model.u32": RNG.integers(0, 2**32, size=3).astype(np.uint32),
        "model.i16": RNG.integers(-1000, 1000, size=3).astype(np.int16),
    }


# name -> (binding dtype, storage shape handed to TensorSpec, logical bytes)
EXOTIC = {
    "w.bf16": ("bfloat16", [3], 6),
    "w.f8_e4m3": ("float8_e4m3fn", [5], 5),
    "w.f8_e5m2": ("float8_e5m2", [2, 2], 4),
    "w.f8_e8m0": ("float8_e8m0fnu", [1], 1),
    "w.f8_e4m3fnuz": ("float8_e4m3fnuz", [3], 3),
    "w.f8_e5m2fnuz": ("float8_e5m2fnuz", [1, 1], 1),
    "w.f4": ("float4_e2m1fn_x2", [2, 3], 6),  # 2 x 3 bytes holding 2 x 6 F4 values
    "w.f4_scalar_pair": ("float4_e2m1fn_x2", [1], 1),
}


def write_numpy_file(path, tensors, metadata):
    save_file(tensors, path, metadata=metadata)
    return {name: np.ascontiguousarray(t).tobytes() for name, t in tensors.items()}


def write_exotic_file(path):
    buffers, specs = {}, {}
    for name, (dtype, shape, nbytes) in EXOTIC.items():
        buffers[name] = raw(nbytes)
        specs[name] = TensorSpec(dtype=dtype, shape=shape, data_ptr=buffers[name].ctypes.data, data_len=nbytes)
    with open(path, "wb") as f:
        f.write(bytes(serialize(specs, metadata={"format": "mx"})))
    return {name: b.tobytes() for name, b in buffers.items()}


def table_rows(path, rel, sources):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + n])
    rows = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        assert data[8 + n + begin : 8 + n + end] == sources[name], name
        rows.append((rel, name, info["dtype"], info["shape"], 8 + n + begin, end - begin,
                     xxhash.xxh3_64_intdigest(sources[name])))
    # qload's order: by offset, zero-size tensors before the one starting at the same byte, then name
    return sorted(rows, key=lambda r: (r[0], r[4], r[5], r[1]))


def write_sharded(dirname):
    os.makedirs(dirname, exist_ok=True)
    shards = [
        {"layers.0.attn.q.weight": RNG.standard_normal((2, 4)).astype(np.float16),
         "layers.0.attn.k.weight": RNG.standard_normal((2, 4)).astype(np.float16)},
        {"layers.1.mlp.up.weight": RNG.standard_normal((3, 2)).astype(np.float32),
         "lm_head.weight": RNG.standard_normal(4).astype(np.float32)},
    ]
    weight_map, total, sources = {}, 0, []
    for i, tensors in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        sources.append((name, write_numpy_file(os.path.join(dirname, name), tensors, {"format": "pt"})))
        for t, arr in tensors.items():
            weight_map[t] = name
            total += arr.nbytes
    with open(os.path.join(dirname, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
    with open(os.path.join(dirname, "config.json"), "w") as f:
        json.dump({"model_type": "tiny", "quantization_config": {"quant_method": "fp8", "bits": 8}}, f, indent=2)
    return sources


def cxx_row(r):
    rel, name, dtype, shape, offset, nbytes, digest = r
    dims = ", ".join(str(d) for d in shape)
    return f'    {{"{rel}", "{name}", "{dtype}", {{{dims}}}, {offset}, {nbytes}, 0x{digest:016x}ull}},'


def main():
    os.makedirs(DATA, exist_ok=True)
    rows = []
    basic = os.path.join(DATA, "reference_basic.safetensors")
    rows += table_rows(basic, "reference_basic.safetensors",
                       write_numpy_file(basic, numpy_tensors(), {"format": "np"}))
    exotic = os.path.join(DATA, "reference_exotic.safetensors")
    rows += table_rows(exotic, "reference_exotic.safetensors", write_exotic_file(exotic))
    for name, sources in write_sharded(os.path.join(DATA, "reference_sharded")):
        rows += table_rows(os.path.join(DATA, "reference_sharded", name), f"reference_sharded/{name}", sources)
    with open(os.path.join(HERE, "reference_expected.inc"), "w") as f:
        f.write(f"// Generated by make_reference_files.py with safetensors {safetensors.__version__} and numpy "
                f"{np.__version__}; do not edit.\n")
        f.write("// {file, tensor, dtype, shape, absolute offset, bytes, XXH3-64 of the bytes written}\n")
        f.write("\n".join(cxx_row(r) for r in rows) + "\n")
    print(f"{len(rows)} tensors", file=sys.stderr)


if __name__ == "__main__":
    main()

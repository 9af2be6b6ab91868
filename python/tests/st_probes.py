"""Probes of safetensors 0.8's public contract, run against safetensors and against qload.

Each probe calls one API (safe_open and its slices, save / save_file / load / load_file, and
for torch save_model / load_model) through a `Lib` and returns what it got; `differences`
compares two runs probe by probe. Values are compared exactly (tensors by dtype, shape and
bytes, dicts with their order); an exception must be an instance of the class safetensors
raised. Strides are not compared: a torch slice is a view in safetensors and a contiguous copy
in qload (documented in docs/python.md). `EXTENSIONS` lists the probes where safetensors fails
and qload deliberately succeeds, `DIFFERENT_ERRORS` those where both fail with unrelated
classes, each with its reason.
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Callable

# name -> (dtype code, shape, raw bytes): every dtype, a 0-d, an empty and a 2-D tensor
_SPECS = {"f64": ("F64", [2], 16), "f32": ("F32", [3, 4], 48), "f16": ("F16", [5], 10), "bf16": ("BF16", [2, 2], 8),
          "i64": ("I64", [2], 16), "u64": ("U64", [1], 8), "i32": ("I32", [3], 12), "u32": ("U32", [2], 8),
          "i16": ("I16", [2], 4), "u16": ("U16", [3], 6), "i8": ("I8", [4], 4), "u8": ("U8", [7], 7),
          "e4m3": ("F8_E4M3", [4], 4), "e5m2": ("F8_E5M2", [4], 4), "c64": ("C64", [2], 16),
          "scalar": ("F32", [], 4), "empty": ("F32", [0, 3], 0), "flag": ("BOOL", [3], 3)}
ORDER = ["f64", "i64", "u64", "c64", "f32", "scalar", "empty", "i32", "u32", "bf16", "f16", "i16", "u16",
         "e4m3", "e5m2", "i8", "u8", "flag"]
# (safetensors fails, qload succeeds): why
EXTENSIONS = {
    "np.get_tensor.bf16": "numpy has bfloat16 through ml_dtypes; safetensors.numpy has no type for it",
    "np.get_tensor.e4m3": "the same for float8_e4m3fn", "np.get_tensor.e5m2": "the same for float8_e5m2",
    "np.get_tensors": "the file holds bf16/fp8 tensors, which qload returns through ml_dtypes",
    "np.load_file": "the same", "np.load": "the same",
}
# (both fail, with different classes): why
DIFFERENT_ERRORS = {
    "np.slice.backwards": "safetensors fails inside PyByteArray (SystemError); qload says the slice runs backwards",
}


def tensor_bytes(name: str) -> bytes:
    _, _, n = _SPECS[name]
    if name == "flag":
        return bytes([0, 1, 7])  # a BOOL byte that is neither 0 nor 1 comes back as stored
    return bytes((i * 37 + len(name)) % 120 for i in range(n))  # no NaN or inf patterns


def raw_file(path, entries: dict, metadata=None, tail: bytes = b"") -> str:
    """A .safetensors file laid out by hand: neither library under test wrote it."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, (code, shape, payload) in entries.items():
        header[name] = {"dtype": code, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data + tail)
    return str(path)


def make_files(d) -> dict:
    """The files the reading probes open, by role."""
    every = {name: (_SPECS[name][0], _SPECS[name][1], tensor_bytes(name)) for name in ORDER}
    small = {"w": ("F32", [3, 4], tensor_bytes("f32"))}
    files = {"all": raw_file(d / "all.safetensors", every, {"format": "pt", "k": "v"}),
             "plain": raw_file(d / "plain.safetensors", small),
             "empty_meta": raw_file(d / "empty_meta.safetensors", small, {}),
             "no_suffix": raw_file(d / "weights.bin", small),
             "trailing": raw_file(d / "trailing.safetensors", small, tail=b"xx"),
             "bad_dtype": raw_file(d / "bad_dtype.safetensors", {"w": ("XX", [1], b"1234")}),
             "bad_meta": raw_file(d / "bad_meta.safetensors", small, {"x": 1}),
             "wrong_size": raw_file(d / "wrong_size.safetensors", {"w": ("F32", [2], b"123")}),
             "dir": str(d)}
    for role, content in {"short": b"\x05", "empty_file": b"", "huge_header": struct.pack("<Q", 10 ** 12) + b"{}",
                          "bad_json": struct.pack("<Q", 10) + b"{bad json}"}.items():
        (d / f"{role}.safetensors").write_bytes(content)
        files[role] = str(d / f"{role}.safetensors")
    with open(files["all"], "rb") as f:
        (d / "truncated.safetensors").write_bytes(f.read()[:-4])
    files["truncated"] = str(d / "truncated.safetensors")
    return files


@dataclass
class Lib:
    """One implementation of the API: safetensors' modules or qload's."""
    safe_open: Callable
    io: object  # safetensors.numpy / safetensors.torch, or qload.numpy / qload.torch
    error: type  # the class a caught SafetensorError must be


class Raised:
    def __init__(self, e: BaseException):
        self.type, self.message = type(e), str(e)

    def __repr__(self):
        return f"raises {self.type.__name__}: {self.message[:120]}"


def normalize(value):
    """Values made comparable: tensors by (kind, dtype, shape, bytes), containers kept in order."""
    module = type(value).__module__
    if module == "numpy" and hasattr(value, "dtype"):
        import numpy as np

        array = np.ascontiguousarray(value)
        return ("array", str(array.dtype), array.shape, array.reshape(-1).view(np.uint8).tobytes())
    if module == "torch" and hasattr(value, "dtype"):
        import torch

        t = value.detach().to("cpu").contiguous()
        data = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        return ("tensor", str(t.dtype), tuple(t.shape), data)
    if isinstance(value, dict):
        return ("dict", [(k, normalize(v)) for k, v in value.items()])
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [normalize(v) for v in value])
    if isinstance(value, (str, bytes, int, float, bool, type(None))):
        return value
    return ("object", type(value).__name__)


def outcome(probe: Callable, lib: Lib, files: dict, tmp):
    try:
        return normalize(probe(lib, files, tmp))
    except Exception as e:  # noqa: BLE001 - the exception is the result being compared
        return Raised(e)


def differences(theirs: dict, ours: dict) -> list:
    """[(probe, safetensors' result, qload's)] where they differ (EXTENSIONS excepted)."""
    out = []
    for name, want in theirs.items():
        got = ours[name]
        if isinstance(want, Raised):
            if isinstance(got, Raised) and (issubclass(got.type, want.type) or name in DIFFERENT_ERRORS):
                continue
            if not isinstance(got, Raised) and name in EXTENSIONS:
                continue
        elif not isinstance(got, Raised) and got == want:
            continue
        out.append((name, want, got))
    return out


def run(probes: dict, lib: Lib, files: dict, tmp) -> dict:
    results = {}
    for name, probe in probes.items():
        work = tmp / name.replace("/", "_")
        work.mkdir()
        results[name] = outcome(probe, lib, files, work)
    return results

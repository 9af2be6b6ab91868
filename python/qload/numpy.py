"""qload.numpy: the contract of safetensors.numpy (0.8), through qload.

load_file and load read with qload (checked as qload checks every file); save and save_file
write with qload's writer, byte for byte what safetensors writes (see _st_write). Errors are
qload's and, where safetensors is installed, also safetensors.SafetensorError.
"""
from __future__ import annotations

import os
import sys
from typing import Dict, Optional, Union

from . import _st_write
from ._safe_open import safe_open
from ._st_args import check_backend


def _entries(tensor_dict) -> list:
    import numpy as np

    entries = []
    for name, array in tensor_dict.items():
        code = _st_write.dtype_code(array.dtype.name)
        # Little-endian and contiguous, as the format stores it. safetensors writes the memory of
        # a strided array as it lies (not its values); qload writes the values.
        data = np.ascontiguousarray(array).reshape(array.shape)  # (ascontiguousarray makes 0-d 1-d)
        if data.dtype.byteorder == ">" or (data.dtype.byteorder == "=" and sys.byteorder == "big"):
            data = data.byteswap().view(data.dtype.newbyteorder("<"))
        entries.append((name, code, list(data.shape), data.reshape(-1).view(np.uint8)))
    return entries


def save(tensor_dict: Dict[str, "object"], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """The bytes of a .safetensors file holding `tensor_dict` (and `metadata`, text only)."""
    return _st_write.to_bytes(_entries(tensor_dict), metadata)


def save_file(tensor_dict: Dict[str, "object"], filename: Union[str, os.PathLike],
              metadata: Optional[Dict[str, str]] = None) -> None:
    """Writes `tensor_dict` to `filename` (atomically: a temp file renamed over it)."""
    _st_write.to_file(_entries(tensor_dict), filename, metadata)


def load(data: bytes) -> Dict[str, "object"]:
    """The tensors of a .safetensors file's bytes as writable numpy arrays, in file order."""
    from ._dtypes import convert

    native = _st_write.native_from_bytes(data)
    return {name: convert(carrier, dtype, "np") for name, carrier, dtype in native.arrays()}


def load_file(filename: Union[str, os.PathLike], *, backend: str = "mmap") -> Dict[str, "object"]:
    """Every tensor of a .safetensors file as numpy arrays, in file order (each copied out of the
    mapped file, as safetensors does; `backend` is checked and, as in safe_open, changes nothing)."""
    check_backend(backend)
    with safe_open(filename, framework="np", backend=backend) as f:
        return f.get_tensors()

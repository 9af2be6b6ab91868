"""save / save_file / load (bytes) of qload.torch and qload.numpy, through qload's own writer.

The bytes are those safetensors 0.8 writes for the same tensors and metadata: tensors ordered
by dtype (widest alignment first, in the order of safetensors' Dtype enum) then by name, the
header as the writer lays it out (formats/safetensors_writer.hpp). One deliberate difference:
with two or more metadata keys safetensors writes them in its hash map's order, which changes
from run to run; qload writes them sorted, so its files are reproducible.
"""
from __future__ import annotations

import os
import shutil
import tempfile

from . import _qload
from ._st_args import check_path
from ._st_errors import as_safetensors_errors, error

# safetensors 0.8's Dtype enum, in declaration order; files hold the last first.
_ENUM_ORDER = ["BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ",
               "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "C64", "F64", "I64", "U64"]
_RANK = {code: i for i, code in enumerate(_ENUM_ORDER)}

# the frameworks' dtype names (numpy's dtype.name, torch's str(dtype) tail) -> safetensors codes
DTYPE_CODES = {"bool": "BOOL", "int8": "I8", "uint8": "U8", "int16": "I16", "uint16": "U16", "int32": "I32",
               "uint32": "U32", "int64": "I64", "uint64": "U64", "float16": "F16", "float32": "F32",
               "float64": "F64", "bfloat16": "BF16", "float8_e4m3fn": "F8_E4M3", "float8_e4m3fnuz": "F8_E4M3FNUZ",
               "float8_e5m2": "F8_E5M2", "float8_e5m2fnuz": "F8_E5M2FNUZ", "float8_e8m0fnu": "F8_E8M0",
               "float4_e2m1fn_x2": "F4", "complex64": "C64"}


def dtype_code(name: str) -> str:
    code = DTYPE_CODES.get(name)
    if code is None:
        raise error(_qload.InvalidArgumentError,
                    f'Unknown dtype "{name}". Supported dtypes: {", ".join(DTYPE_CODES)}', code="invalid_argument")
    return code


def check_metadata(metadata):
    """None or a dict of str to str (TypeError otherwise, as safetensors' signature)."""
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise TypeError(f"argument 'metadata': '{type(metadata).__name__}' object is not an instance of 'dict'")
    for key, value in metadata.items():
        for item in (key, value):
            if not isinstance(item, str):
                raise TypeError(f"argument 'metadata': '{type(item).__name__}' object is not an instance of 'str'")
    return metadata


def ordered(entries: list) -> list:
    """[(name, code, shape, uint8 bytes)] in the order safetensors writes them."""
    for name, *_ in entries:
        if not isinstance(name, str):
            raise TypeError(f"argument 'tensor_dict': '{type(name).__name__}' object is not an instance of 'str'")
    return sorted(entries, key=lambda e: (-_RANK[e[1]], e[0]))


def to_bytes(entries: list, metadata) -> bytes:
    entries = ordered(entries)
    with as_safetensors_errors():
        header = _qload.safetensors_header(entries, check_metadata(metadata))
    return header + b"".join(e[3].tobytes() for e in entries)


def to_file(entries: list, filename, metadata) -> None:
    path = check_path(filename)
    entries = ordered(entries)
    with as_safetensors_errors():
        _qload.write_safetensors(path, entries, check_metadata(metadata))


def native_from_bytes(data):
    """A qload model over `data` (the bytes of a .safetensors file), read into qload's memory.

    The bytes go to an anonymous memory file that qload opens like any checkpoint (so they are
    checked as a file is), through a link named *.safetensors; both are gone on return.
    """
    if not isinstance(data, bytes):
        raise TypeError(f"argument 'bytes': '{type(data).__name__}' object is not an instance of 'bytes'")
    fd = os.memfd_create("qload-bytes")
    link_dir = tempfile.mkdtemp(prefix="qload-bytes-")
    try:
        _write_all(fd, data)
        link = os.path.join(link_dir, "bytes.safetensors")
        os.symlink(f"/proc/self/fd/{fd}", link)
        args = _qload.LoadArgs()
        args.source = link
        args.device = "cpu"
        args.settings = [("load_mode", "read"), ("direct_io", "off"), ("digests", "off")]
        with as_safetensors_errors():
            return _qload.load(args, None)
    finally:
        shutil.rmtree(link_dir, ignore_errors=True)
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)  # os.write may write less than asked (above 2 GiB it always does)
    while view:
        view = view[os.write(fd, view):]

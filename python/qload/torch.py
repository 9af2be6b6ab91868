"""qload.torch: the contract of safetensors.torch (0.8), through qload.

load_file reads with qload's loader (cuda devices directly); load reads a file's bytes; save,
save_file and save_model write with qload's writer, byte for byte what safetensors writes (see
_st_write); load_model fills a module. Errors are qload's and, where safetensors is installed,
also safetensors.SafetensorError; argument errors are the builtins safetensors raises.
"""
from __future__ import annotations

import os
from typing import Dict, List, Optional, Tuple, Union

from . import _st_write
from . import load as _load
from ._dtypes import convert
from ._st_args import check_backend, check_device, check_path
from ._st_errors import as_safetensors_errors, compatible
from ._st_shared import duplicates, shared_groups


def _check_tensors(tensors) -> None:
    import torch

    if not isinstance(tensors, dict):
        raise ValueError(f"Expected a dict of [str, torch.Tensor] but received {type(tensors)}")
    for name, tensor in tensors.items():
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"Key `{name}` is invalid, expected torch.Tensor but received {type(tensor)}")
    sparse = [name for name, tensor in tensors.items() if tensor.layout != torch.strided]
    if sparse:
        raise ValueError(f"You are trying to save a sparse tensors: `{sparse}` which this library does not support. "
                         "Make it dense with `.to_dense()` first.")
    failing = [group for group in shared_groups(tensors) if len(group) > 1]
    if failing:
        raise RuntimeError(f"Some tensors share memory, this will lead to duplicate memory on disk and potential "
                           f"differences when loading them again: {failing}. Save the model with save_model "
                           "(https://huggingface.co/docs/safetensors/torch_shared_tensors).")


def _entries(tensors) -> list:
    import torch

    _check_tensors(tensors)
    entries = []
    for name, tensor in tensors.items():
        if not tensor.is_contiguous():
            raise ValueError(f"You are trying to save a non contiguous tensor: `{name}` which is not allowed. "
                             "Call `.contiguous()` on it first (or use save_model, which does).")
        dtype = str(tensor.dtype).split(".")[-1]
        if dtype not in _st_write.DTYPE_CODES:
            raise compatible(KeyError)(tensor.dtype)  # what safetensors raises for torch.complex128
        shape = list(tensor.shape)
        if dtype == "float4_e2m1fn_x2" and shape:
            shape[-1] *= 2  # the header counts F4 elements, two to a byte
        data = tensor.detach().to("cpu").reshape(-1).view(torch.uint8).numpy()
        entries.append((name, _st_write.dtype_code(dtype), shape, data))
    return entries


def save(tensors: Dict[str, "object"], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """The bytes of a .safetensors file holding `tensors` (contiguous, not sharing memory)."""
    return _st_write.to_bytes(_entries(tensors), metadata)


def save_file(tensors: Dict[str, "object"], filename: Union[str, os.PathLike],
              metadata: Optional[Dict[str, str]] = None) -> None:
    """Writes `tensors` to `filename` (atomically: a temp file renamed over it)."""
    _st_write.to_file(_entries(tensors), filename, metadata)


def load(data: bytes) -> Dict[str, "object"]:
    """The tensors of a .safetensors file's bytes, on cpu, writable, in file order."""
    native = _st_write.native_from_bytes(data)
    return {name: convert(carrier, dtype, "pt") for name, carrier, dtype in native.arrays()}


def load_file(filename, device: Union[str, int] = "cpu", *, backend: Optional[str] = None) -> Dict[str, "object"]:
    """Every tensor of a .safetensors file (or a checkpoint directory) as torch tensors on `device`.

    On cpu the file is mapped or read as qload.load decides by default (load_mode "auto": mapped
    when the page cache holds the file, read otherwise; QLOAD_LOAD_MODE overrides). A mapping is
    private copy-on-write: tensors stay valid after the call and are writable, and writing them
    never changes the file. backend "mmap" or "pread" (safetensors' names) forces load_mode
    "mmap" or "read". cuda devices are loaded there directly (qload's GPU path). Digests are
    not computed (nothing is checked against them; QLOAD_DIGESTS overrides).
    """
    path = check_path(filename)
    device = check_device(device, "pt")
    if device == "cuda":
        device = "cuda:0"
    host = not device.startswith("cuda")  # mps, xpu, ...: loaded on cpu, then moved there
    mode = None if backend is None else {"mmap": "mmap", "pread": "read"}[check_backend(backend)]
    if mode is None and "QLOAD_LOAD_MODE" not in os.environ:
        mode = "auto"
    # No digests setting: without a lock its default (auto) hashes nothing, as safetensors does.
    settings = {"load_mode": mode} if host and mode else {}
    with as_safetensors_errors():
        tensors = dict(_load(path, device="cpu" if host else device, framework="pt", progress=False,
                             settings=settings))
    if host and device != "cpu":
        tensors = {name: t.to(device) for name, t in tensors.items()}
    return tensors


def save_model(model, filename: Union[str, os.PathLike], metadata: Optional[Dict[str, str]] = None,
               force_contiguous: bool = True) -> None:
    """Saves `model.state_dict()`, one name per group of tensors sharing memory; each dropped name
    is recorded in the metadata as {dropped: kept} (unless the caller's metadata has that key)."""
    state_dict = model.state_dict()
    for kept, dropped in duplicates(state_dict).items():
        for name in dropped:
            metadata = {} if metadata is None else metadata
            metadata.setdefault(name, kept)
            del state_dict[name]
    if force_contiguous:
        state_dict = {k: v.contiguous() for k, v in state_dict.items()}
    try:
        save_file(state_dict, filename, metadata=metadata)
    except ValueError as e:
        raise ValueError(f"{e} Or use save_model(..., force_contiguous=True), read the docs for potential caveats.")


def load_model(model, filename: Union[str, os.PathLike], strict: bool = True, device: Union[str, int] = "cpu", *,
               backend: Optional[str] = None) -> Tuple[List[str], List[str]]:
    """Loads `filename` into `model` (tied weights filled through the name the file holds).

    Returns (missing, unexpected): the model's names the file did not fill, and the file's names
    the model has no place for; with `strict`, either being non-empty is a RuntimeError.
    """
    state_dict = load_file(filename, device=device, backend=backend)
    dropped = duplicates(model.state_dict(), preferred=state_dict.keys())
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    missing = set(missing)
    for names in dropped.values():
        for name in names:
            if name in missing:
                missing.remove(name)
            else:
                unexpected.append(name)
    if strict and (missing or unexpected):
        error = f"Error(s) in loading state_dict for {model.__class__.__name__}:"
        if missing:
            error += "\n    Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in sorted(missing))
        if unexpected:
            error += "\n    Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in sorted(unexpected))
        raise RuntimeError(error)
    return missing, unexpected

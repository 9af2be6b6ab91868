"""safe_open with the contract of safetensors 0.8's safe_open: `from qload import safe_open`.

The file is mapped, not read: opening costs the header, and each get_tensor copies just that
tensor out of the mapping, so tensors outlive the file object (and a slice taken inside the
`with` block still reads after it: it holds the mapping). Errors are qload's classes and, when
safetensors is installed, also safetensors.SafetensorError (see _st_errors).
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile

from . import _qload
from ._dtypes import PACKED, convert
from ._st_args import check_backend, check_device, check_framework, check_path, check_str
from ._st_errors import as_safetensors_errors, closed, error, missing_tensor
from ._st_slice import checked_index


def _header(path: str) -> dict:
    """The JSON header (qload has validated it), for what qload's catalog does not keep: whether
    `__metadata__` was present at all, and the end of the data (safetensors refuses trailing bytes)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        size = os.fstat(f.fileno()).st_size
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    if 8 + n + end != size:
        raise error(_qload.CorruptError, f"{path}: incomplete metadata, file not fully covered "
                    f"({size - 8 - n - end} bytes after the last tensor)", code="corrupt", file=path)
    return header


def _map(path: str):
    """The native model over `path`, mapped. qload knows a safetensors file by its suffix and
    safetensors does not care: another name is opened through a suffixed link."""
    mode = os.stat(path).st_mode  # FileNotFoundError as safetensors raises it
    if not stat.S_ISREG(mode):
        raise error(_qload.IoError, f"{path}: not a regular file", code="io", file=path)
    link_dir = None
    source = path
    if not path.endswith(".safetensors"):
        link_dir = tempfile.mkdtemp(prefix="qload-safe-open-")
        source = os.path.join(link_dir, "file.safetensors")
        os.symlink(os.path.abspath(path), source)
    try:
        args = _qload.LoadArgs()
        args.source = source
        args.device = "cpu"
        # Map, don't read: a safe_open costs the header, as safetensors' does.
        args.settings = [("load_mode", "mmap"), ("digests", "off")]
        with as_safetensors_errors():
            return _qload.load(args, None)
    finally:
        if link_dir is not None:
            shutil.rmtree(link_dir, ignore_errors=True)  # the mapping holds the file itself


_WHOLE = object()  # the index get_tensor passes: the whole tensor (None is an index of its own)


def _make(carrier, dtype: str, framework: str, index, shape: list, device: str):
    """One tensor (or a slice of it unless `index` is _WHOLE) copied out of the mapping."""
    if dtype in PACKED:
        raise error(_qload.UnsupportedError, f"a {dtype} tensor is packed sub-byte data", code="unsupported")
    if framework == "pt":
        return _torch_copy(carrier, dtype, index, device)
    import numpy as np

    # BOOL bytes other than 0/1 come back as stored (numpy's bool view keeps them).
    view = convert(carrier, dtype, "np")
    out = np.array(view if index is _WHOLE else view[checked_index(index, shape)], copy=True)
    return out if framework == "np" else _from_numpy(out, framework)


def _torch_copy(carrier, dtype: str, index, device: str):
    import torch

    if dtype == "BOOL":  # copied as bytes: torch's bool copy would turn a stored 7 into 1
        raw = convert(carrier, dtype, "pt").view(torch.uint8)
        view = raw if index is _WHOLE else raw[index]
        out = view.clone(memory_format=torch.contiguous_format).view(torch.bool)
    else:
        view = convert(carrier, dtype, "pt")
        view = view if index is _WHOLE else view[index]
        out = view.clone(memory_format=torch.contiguous_format)
    return out.to(device) if device != "cpu" else out


def _from_numpy(array, framework: str):
    if framework == "tf":
        import tensorflow as tf

        return tf.convert_to_tensor(array)
    if framework == "flax":
        import jax.numpy as jnp

        return jnp.array(array)
    if framework == "mlx":
        import mlx.core as mx

        return mx.array(array)
    import paddle

    return paddle.to_tensor(array)


class _Slice:
    """What get_slice returns: shape, dtype, and indexing. It holds the mapping, so it reads
    after the file object is closed (as safetensors' does)."""

    def __init__(self, model, info: dict, framework: str, device: str):
        self._model, self._info, self._framework, self._device = model, info, framework, device

    def get_shape(self) -> list:
        return list(self._info["shape"])

    def get_dtype(self) -> str:
        return self._info["dtype"]

    def __getitem__(self, index):
        carrier, dtype = self._model.array(self._info["name"])
        with as_safetensors_errors():
            return _make(carrier, dtype, self._framework, index, self.get_shape(), self._device)


class safe_open:
    """safe_open(filename, framework, device="cpu", *, backend="mmap"): one .safetensors file.

    framework: "pt"/"torch", "np"/"numpy", "tf"/"tensorflow", "flax"/"jax", "mlx" or "paddle"
    (the library is imported when a tensor is made; torch and paddle at open, as safetensors does).
    device: "cpu", "cuda", "cuda:N", an int N (cuda:N), None (cpu), a torch.device, or another
    accelerator safetensors names (mps, xpu, npu, ...); numpy takes only cpu.
    backend: how safetensors would serve the bytes, "mmap" or "pread"; accepted and checked for
    code written for safetensors, and the same for qload: the file is mapped and each tensor is
    copied out of the mapping (the bytes are identical either way).
    keys() (sorted), offset_keys() (file order), metadata() (the header's __metadata__, {} when
    empty, None when absent), get_tensor(name), get_tensors() (all, in file order),
    get_slice(name) (get_shape(), get_dtype(), and indexing: f.get_slice("w")[0:2, :]).
    After the `with` block these raise SafetensorError("File is closed"); slices still read.
    """

    def __init__(self, filename, framework, device="cpu", *, backend: str = "mmap"):
        path = check_path(filename)
        self._framework = check_framework(framework)
        self._device = check_device(device, self._framework)
        check_backend(backend)
        if self._framework == "pt":
            import torch  # noqa: F401  (safetensors imports torch and paddle at open)
        elif self._framework == "paddle":
            import paddle  # noqa: F401
        self._model = _map(path)
        self._infos = {info["name"]: info for info in self._model.infos()}
        with as_safetensors_errors():
            metadata = _header(path).get("__metadata__")
        self._metadata = dict(metadata) if metadata is not None else None

    def __enter__(self) -> "safe_open":
        return self

    def __exit__(self, *exc) -> None:
        self._model = None  # tensors handed out were copies and slices hold the mapping

    def _open(self):
        if self._model is None:
            raise closed()
        return self._model

    def keys(self) -> list:
        self._open()
        return sorted(self._infos)

    def offset_keys(self) -> list:
        """The names in file order."""
        self._open()
        return list(self._infos)

    def metadata(self):
        self._open()
        return None if self._metadata is None else dict(self._metadata)

    def get_slice(self, name) -> _Slice:
        model = self._open()
        check_str(name, "name")
        if name not in self._infos:
            raise missing_tensor(name)
        return _Slice(model, self._infos[name], self._framework, self._device)

    def get_tensor(self, name):
        model = self._open()
        check_str(name, "name")
        if name not in self._infos:
            raise missing_tensor(name)
        carrier, dtype = model.array(name)
        with as_safetensors_errors():
            return _make(carrier, dtype, self._framework, _WHOLE, list(self._infos[name]["shape"]), self._device)

    def get_tensors(self) -> dict:
        """Every tensor, in file order, as get_tensor makes them."""
        self._open()
        return {name: self.get_tensor(name) for name in self._infos}

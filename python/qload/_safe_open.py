"""safe_open with the contract of safetensors.safe_open: `from qload import safe_open`.

The file is mapped, not read: opening costs the header, and each get_tensor copies just that
tensor out of the mapping (as safetensors does), so tensors outlive the file object.
"""
from __future__ import annotations

import os

from . import _qload
from ._dtypes import PACKED, convert


class _Slice:
    """What get_slice returns: the tensor's shape and dtype, and numpy/torch-style indexing."""

    def __init__(self, owner: "safe_open", name: str):
        self._owner = owner
        self._name = name

    def get_shape(self) -> list:
        return list(self._owner._infos[self._name]["shape"])

    def get_dtype(self) -> str:
        return self._owner._infos[self._name]["dtype"]

    def __getitem__(self, index):
        return self._owner._copy(self._owner._view(self._name)[index])


class safe_open:
    """safe_open(filename, framework, device="cpu"): a context manager over one checkpoint file.

    keys() (sorted, as safetensors), metadata() (the file's __metadata__ or None),
    get_tensor(name), get_slice(name) (slice it like an array: f.get_slice("w")[0:2, :]).
    """

    def __init__(self, filename, framework: str, device: str = "cpu"):
        if not isinstance(filename, (str, os.PathLike)):
            raise TypeError(f"filename must be a path, not {type(filename).__name__}")
        if framework not in ("np", "numpy", "pt", "torch"):
            raise ValueError(f"framework must be 'np' or 'pt', not {framework!r}")
        if not isinstance(device, str):
            device = str(device)  # torch.device, or an int as safetensors accepts
            if device.isdigit():
                device = f"cuda:{device}"
        self._framework = "np" if framework in ("np", "numpy") else "pt"
        self._device = device
        if self._framework == "np" and device != "cpu":
            raise ValueError(f"framework='np' holds tensors in host memory; device must be 'cpu', not {device!r}")
        path = os.fspath(filename)
        args = _qload.LoadArgs()
        args.source = path
        args.device = "cpu"
        # Map, don't read: a safe_open costs the header, as safetensors' does.
        args.settings = [("load_mode", "mmap"), ("digests", "off")]
        self._model = _qload.load(args, None)
        self._infos = {info["name"]: info for info in self._model.infos()}
        files = _qload.inspect(path)["files"]
        self._metadata = dict(files[0]["metadata"]) if files and files[0]["metadata"] else None

    def __enter__(self) -> "safe_open":
        return self

    def __exit__(self, *exc) -> None:
        self._model = None  # arrays already handed out were copies; the mapping can go

    def keys(self) -> list:
        return sorted(self._infos)

    def offset_keys(self) -> list:
        """The names in file order."""
        return list(self._infos)

    def metadata(self):
        return self._metadata

    def _check_open(self):
        if self._model is None:
            raise ValueError("the file is closed (safe_open was used outside its `with` block)")

    def _view(self, name: str):
        """A read-only view of the mapped tensor (numpy or torch), no copy."""
        self._check_open()
        if name not in self._infos:
            raise _qload.NotFoundError(f"tensor '{name}' is not in this file")
        carrier, dtype = self._model.array(name)
        if dtype in PACKED:
            raise _qload.UnsupportedError(f"tensor '{name}' is {dtype}, a packed sub-byte type")
        if self._framework == "np":
            return convert(carrier, dtype, "np")
        import torch  # noqa: F401

        return convert(carrier, dtype, "pt")

    def _copy(self, view):
        if self._framework == "np":
            import numpy as np

            return np.array(view, copy=True)
        out = view.clone()
        return out.to(self._device) if self._device != "cpu" else out

    def get_tensor(self, name: str):
        return self._copy(self._view(name))

    def get_slice(self, name: str) -> _Slice:
        self._check_open()
        if name not in self._infos:
            raise _qload.NotFoundError(f"tensor '{name}' is not in this file")
        return _Slice(self, name)

"""The arguments of safetensors' API, checked as safetensors 0.8 checks them (same exception types).

safetensors' Rust signatures raise TypeError for an argument of the wrong Python type and
SafetensorError for a value it does not accept; these helpers do the same.
"""
from __future__ import annotations

import os
import re

from . import _qload
from ._st_errors import error

# framework spelling -> the library the tensors are made by (safetensors 0.8's Framework enum)
FRAMEWORKS = {"pt": "pt", "torch": "pt", "np": "np", "numpy": "np", "tf": "tf", "tensorflow": "tf",
              "flax": "flax", "jax": "flax", "mlx": "mlx", "paddle": "paddle"}
BACKENDS = ("mmap", "pread")
# safetensors' Device: cpu, mps, or an accelerator kind with an optional index (a bare int is an index)
_DEVICE = re.compile(r"cpu|mps|(cuda|npu|xpu|xla|mlu|musa|hpu)(:\d+)?")


def check_str(value, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"argument '{name}': '{type(value).__name__}' object is not an instance of 'str'")
    return value


def check_path(filename) -> str:
    if not isinstance(filename, (str, os.PathLike)) or isinstance(filename, bytes):
        raise TypeError(f"argument 'filename': expected str or os.PathLike object, not {type(filename).__name__}")
    path = os.fspath(filename)
    if isinstance(path, bytes):
        raise TypeError("argument 'filename': 'bytes' object is not an instance of 'str'")
    return path


def check_framework(framework) -> str:
    framework = check_str(framework, "framework")
    if framework not in FRAMEWORKS:
        raise error(_qload.InvalidArgumentError, f"framework {framework} is invalid", code="invalid_argument")
    return FRAMEWORKS[framework]


def check_backend(backend) -> str:
    backend = check_str(backend, "backend")
    if backend not in BACKENDS:
        raise error(_qload.InvalidArgumentError,
                    f'backend "{backend}" is invalid (expected one of: "mmap", "pread")', code="invalid_argument")
    return backend


def check_device(device, framework: str) -> str:
    """The device as a torch device string; None is "cpu" and an int N is "cuda:N", as in safetensors.

    A torch.device is accepted too (its string form is checked), where safetensors refuses it.
    """
    if device is None:
        device = "cpu"
    elif isinstance(device, int):
        if device < 0:
            raise error(_qload.InvalidArgumentError, f"device {device} is invalid", code="invalid_argument")
        device = f"cuda:{device}"
    elif not isinstance(device, str):
        device = str(device)  # torch.device("cuda", 1) -> "cuda:1"
    if not _DEVICE.fullmatch(device):
        raise error(_qload.InvalidArgumentError, f"device {device} is invalid", code="invalid_argument")
    if framework == "np" and device != "cpu":
        shown = "cuda:0" if device == "cuda" else device
        raise error(_qload.InvalidArgumentError, f"Device {shown} is not supported for framework numpy",
                    code="invalid_argument")
    return device

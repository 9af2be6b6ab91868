"""Turning the native module's carrier arrays into numpy arrays and torch tensors.

The native module hands every tensor out with a DLPack type every framework accepts: bf16 and
the fp8 family as unsigned integers of the same width, packed sub-byte types (F4, F6) as their
raw bytes. Here they get their real types, as views: nothing is copied.
"""
from __future__ import annotations

# qload dtype -> the name of its type in ml_dtypes (numpy) and in torch, which agree
_VIEW_TYPE = {
    "BF16": "bfloat16",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "F8_E8M0": "float8_e8m0fnu",
    "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2FNUZ": "float8_e5m2fnuz",
}
PACKED = {"F4", "F6_E2M3", "F6_E3M2"}  # handed out as raw bytes, shape [nbytes]


def to_numpy(carrier, dtype: str):
    import numpy as np

    array = np.from_dlpack(carrier)
    view = _VIEW_TYPE.get(dtype)
    if view is None:
        return array
    try:
        import ml_dtypes
    except ImportError as e:
        raise TypeError(
            f"a {dtype} tensor needs the ml_dtypes package for a numpy dtype "
            f"(pip install ml_dtypes), or framework='pt'") from e
    return array.view(getattr(ml_dtypes, view))


def to_torch(carrier, dtype: str, device: str | None = None):
    import torch

    tensor = torch.from_dlpack(carrier)
    view = _VIEW_TYPE.get(dtype)
    if view is not None:
        if not hasattr(torch, view):
            raise TypeError(f"this torch ({torch.__version__}) has no torch.{view} for a {dtype} tensor")
        tensor = tensor.view(getattr(torch, view))
    if device is not None and str(tensor.device) != device:
        tensor = tensor.to(device)
    return tensor


def convert(carrier, dtype: str, framework: str, device: str | None = None):
    if framework == "np" or framework == "numpy":
        return to_numpy(carrier, dtype)
    if framework == "pt" or framework == "torch":
        return to_torch(carrier, dtype, device)
    raise ValueError(f"framework must be 'np' or 'pt', not {framework!r}")

"""qload.torch: the contract of safetensors.torch.load_file, through qload."""
from __future__ import annotations

import os
from typing import Dict, Union

from . import load as _load


def load_file(filename, device: Union[str, int] = "cpu") -> Dict[str, "object"]:
    """Every tensor of a .safetensors file (or a checkpoint directory) as torch tensors on `device`.

    cuda devices are loaded there directly (qload's GPU path), not copied over afterwards.
    """
    if not isinstance(filename, (str, os.PathLike)):
        raise TypeError(f"filename must be a path, not {type(filename).__name__}")
    if isinstance(device, int):
        device = f"cuda:{device}"
    device = str(device)
    if device == "cuda":
        device = "cuda:0"
    return dict(_load(filename, device=device, framework="pt", progress=False))

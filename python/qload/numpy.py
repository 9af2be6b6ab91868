"""qload.numpy: the contract of safetensors.numpy, through qload."""
from __future__ import annotations

import os
from typing import Dict

from . import load as _load


def load_file(filename, device: str = "cpu") -> Dict[str, "object"]:
    """Every tensor of a .safetensors file (or a checkpoint directory) as numpy arrays."""
    if not isinstance(filename, (str, os.PathLike)):
        raise TypeError(f"filename must be a path, not {type(filename).__name__}")
    return dict(_load(filename, device=device, framework="np", progress=False))

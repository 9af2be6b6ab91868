"""qload.fms: IBM Foundation Model Stack (ibm-fms) reading its weights through qload.

FMS builds a model on the meta device and fills it from `fms.utils.serialization.
load_state_dict`, a mapping of checkpoint names to tensors, which its HF-to-FMS adapters then
rename, fuse and shard (tensor parallelism included). qload replaces only that mapping:

    import qload.fms
    from fms.models import get_model

    with qload.fms.loading():
        model = get_model("hf_pretrained", model_path="granite/")

or `qload.fms.install()` for the rest of the process. Everything after the mapping (adapters,
sharding, dtype handling) stays FMS's own.
"""
from __future__ import annotations

import contextlib
import os
from typing import Any, MutableMapping, Optional

from . import load as _load

_original = None


def load_state_dict(model_path, *, source: Optional[str] = None, distributed_strategy: Optional[str] = None,
                    checkpoint_sharding: Optional[str] = None, initial_device=None, rank: int = 0,
                    world_size: int = 1) -> MutableMapping[str, Any]:
    """fms.utils.serialization.load_state_dict's contract, loading safetensors through qload.

    Checkpoints qload does not read (FMS's .pth / .bin, per-rank sharded checkpoints, glob
    patterns) go to FMS's own loader.
    """
    import torch

    initial_device = torch.device("cpu") if initial_device is None else torch.device(initial_device)
    path = os.fspath(model_path) if model_path is not None else None
    plain_safetensors = path is not None and "*" not in path and (
        path.endswith(".safetensors") or (os.path.isdir(path) and any(
            f.endswith(".safetensors") for f in os.listdir(path))))
    if not plain_safetensors or checkpoint_sharding not in (None, "layer"):
        return _original(model_path, source=source, distributed_strategy=distributed_strategy,
                         checkpoint_sharding=checkpoint_sharding, initial_device=initial_device, rank=rank,
                         world_size=world_size)
    if initial_device.type == "meta":
        return {}
    if distributed_strategy in {"hsdp", "fsdp"} and rank != 0:
        return {}  # as FMS: rank 0 loads, FSDP's sync_module_states spreads it
    if initial_device.type == "cpu":
        # FMS copies every tensor into its own parameters (through its adapters), as it does
        # with its lazy safetensors mapping: map the files too rather than hold a second copy.
        # The tensors are read-only views of the mapping; FMS only reads them.
        return dict(_load(path, device="cpu", framework="pt", settings={"load_mode": "mmap"}, progress=False))
    return dict(_load(path, device=f"cuda:{initial_device.index or 0}", framework="pt", progress=False))


def install() -> None:
    """Makes FMS read safetensors checkpoints through qload from now on."""
    global _original
    from fms.utils import serialization

    if _original is None:
        _original = serialization.load_state_dict
    serialization.load_state_dict = load_state_dict


def uninstall() -> None:
    global _original
    if _original is not None:
        from fms.utils import serialization

        serialization.load_state_dict = _original
        _original = None


@contextlib.contextmanager
def loading():
    """Within the block, FMS reads safetensors checkpoints through qload."""
    installed_before = _original is not None
    install()
    try:
        yield
    finally:
        if not installed_before:
            uninstall()

"""qload.fms: IBM Foundation Model Stack (ibm-fms) reading its weights through qload.

    import qload.fms
    from fms.models import get_model

    with qload.fms.loading():
        model = get_model("hf_pretrained", model_path="granite/")

or `qload.fms.install()` for the rest of the process.

FMS builds its model on the meta device, reads the checkpoint as a mapping of names to tensors,
and hands each layer's tensors to its adapters (renames, q/k/v and gate/up fusion, the RoPE row
permutation of q and k, per-scheme fixes), which say what goes into which parameter; it then
allocates each parameter and copies into it. Through qload, FMS's adapters still decide where
every row goes, but qload reads the rows straight into the parameters:

1. each layer's tensors are first given to the adapters as probes (a float64 column whose
   values name the tensor and the row), twice with different codes, so the adapter's output
   says, for every row of every parameter, which checkpoint row it is (and an adapter that
   computes rather than moves gives two different answers);
2. where that is a plain row move (a rename, a fusion at an offset, a row permutation) the
   parameter is allocated as FMS would allocate it and becomes a destination of
   `qload.load_into`, with its rows in the adapter's order;
3. layers whose adapters do anything else (arithmetic, a transpose, an adapter that refuses
   the probe), and tensor-parallel loads, go through FMS's own code. A GPTQ llama layer is one:
   FMS's RoPE step permutes the columns of q's and k's qweight, scales and qzeros (transpose,
   head-row interleave, transpose back), which a one-column probe cannot express and on which
   it raises; load_into has no column-permuted destination, so the whole layer (FMS groups a
   layer's tensors together) takes FMS's path, while the embedding, final norm and head go
   straight in (python/tests/clients/test_fms.py).

Every parameter's bytes are then read once, into their final place: no second copy of the
model exists at any time.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import MutableMapping
from typing import Any, Callable, Optional

from . import inspect as _inspect
from . import load as _load
from . import load_into as _load_into
from . import resolve as _resolve

_original_state_dict = None
_original_into_model = None
_on_report: Optional[Callable[[dict], None]] = None

_ROW_BITS = 32  # a probe code is (tensor number + 1) * 2**32 + row: exact in float64 up to 2**21 tensors


class _StateDict(MutableMapping):
    """The checkpoint as FMS reads it: names to tensors, each loaded through qload when first
    read (the files mapped, so only the tensors read are). load_state_dict_into_model fills a
    model from it straight from the files instead."""

    def __init__(self, path: str, device):
        self.path = path
        self.device = device
        self._names = {t["name"] for t in _inspect(path)["tensors"]}
        self._mapped = None
        self._taken: set = set()

    def _tensors(self):
        if self._mapped is None:
            # No digests: hashing would read (and keep resident) every page of every file, where
            # only the tensors FMS's own path takes are wanted.
            self._mapped = _load(self.path, device="cpu", framework="pt",
                                 settings={"load_mode": "mmap", "digests": False}, progress=False)
        return self._mapped

    def __contains__(self, key):  # without loading anything (Mapping's would read the tensor)
        return key in self._names and key not in self._taken

    def __getitem__(self, key):
        if key not in self._names or key in self._taken:
            raise KeyError(key)
        tensor = self._tensors()[key]
        return tensor if self.device.type == "cpu" else tensor.to(self.device)

    def __setitem__(self, key, value):
        raise TypeError("the checkpoint's state dict is read-only")

    def __delitem__(self, key):
        if key not in self._names or key in self._taken:
            raise KeyError(key)
        self._taken.add(key)

    def __iter__(self):
        return iter(sorted(self._names - self._taken))

    def __len__(self):
        return len(self._names) - len(self._taken)


def load_state_dict(model_path, *, source: Optional[str] = None, distributed_strategy: Optional[str] = None,
                    checkpoint_sharding: Optional[str] = None, initial_device=None, rank: int = 0,
                    world_size: int = 1) -> MutableMapping[str, Any]:
    """fms.utils.serialization.load_state_dict's contract, for safetensors checkpoints qload reads.

    A Hugging Face model id (org/name, org/name@revision) is read from its snapshot in the local
    cache (qload.resolve). Checkpoints qload does not read (FMS's .pth / .bin, per-rank sharded
    checkpoints, glob patterns) go to FMS's own loader.
    """
    import torch

    initial_device = torch.device("cpu") if initial_device is None else torch.device(initial_device)
    path = os.fspath(model_path) if model_path is not None else None
    if path is not None and "*" not in path:
        # A Hugging Face model id (get_model("hf_pretrained", model_path="org/name")): its
        # snapshot in the local cache. A path, or what is not an id, is left as it is.
        path = _resolve(path)
    plain_safetensors = path is not None and "*" not in path and (
        path.endswith(".safetensors") or (os.path.isdir(path) and any(
            f.endswith(".safetensors") for f in os.listdir(path))))
    if not plain_safetensors or checkpoint_sharding not in (None, "layer"):
        return _original_state_dict(model_path, source=source, distributed_strategy=distributed_strategy,
                                    checkpoint_sharding=checkpoint_sharding, initial_device=initial_device,
                                    rank=rank, world_size=world_size)
    if initial_device.type == "meta":
        return {}
    if distributed_strategy in {"hsdp", "fsdp"} and rank != 0:
        return {}  # as FMS: rank 0 loads, FSDP's sync_module_states spreads it
    return _StateDict(path, initial_device)


def _locate(model, key: str):
    """(module, attribute) holding parameter or buffer `key`, or None."""
    owner, _, attr = key.rpartition(".")
    try:
        module = model.get_submodule(owner) if owner else model
    except AttributeError:
        return None
    import torch

    if not isinstance(getattr(module, attr, None), torch.Tensor):
        return None
    return module, attr


def _runs(rows) -> list:
    """Consecutive rows of a 1-d int64 tensor as (begin, end) ranges, in order."""
    import torch

    breaks = torch.nonzero(rows[1:] != rows[:-1] + 1).flatten() + 1
    starts = torch.cat([breaks.new_zeros(1), breaks])
    ends = torch.cat([breaks, breaks.new_full((1,), rows.numel())])
    return list(zip(rows[starts].tolist(), (rows[ends - 1] + 1).tolist()))


def _probe_values(number: int, rows: int, mirrored: bool, torch):
    """Probe codes of one tensor's rows: (number + 1) * 2**32 + row, or with the row mirrored
    (2**31 - 1 - row): an adapter that only moves rows gives the same moves for both, one that
    computes (scales, shifts, mixes) cannot."""
    row = torch.arange(rows, dtype=torch.float64)
    if mirrored:
        row = float((1 << (_ROW_BITS - 1)) - 1) - row
    return row + float((number + 1) << _ROW_BITS)


def _decode(adapted, group, infos, model, mirrored: bool, torch):
    """[(checkpoint name, (module, attribute), output rows [o0, o1), source rows, stored dtype)]
    that the adapter's output of probes says, or None where it is not a plain row move."""
    moves, used = [], set()
    mask = (1 << _ROW_BITS) - 1
    for out_key, value in adapted.items():
        where = _locate(model, out_key)
        if where is None:
            continue  # FMS leaves keys no parameter takes unused too
        param = getattr(*where)
        if (not isinstance(value, torch.Tensor) or value.dtype != torch.float64 or value.dim() != param.dim()
                or value.dim() == 0 or any(s != 1 for s in value.shape[1:]) or value.shape[0] != param.shape[0]):
            return None
        flat = value.reshape(-1)
        if not torch.equal(flat, flat.floor()) or bool((flat < float(1 << _ROW_BITS)).any()):
            return None
        if flat.numel() == 0:
            continue
        codes = flat.long()  # exact: every code is below 2**53
        sources = (codes >> _ROW_BITS) - 1
        rows = codes & mask
        if mirrored:
            rows = ((1 << (_ROW_BITS - 1)) - 1) - rows
        # each source's rows: one block of this parameter's rows
        edges = (torch.nonzero(sources[1:] != sources[:-1]).flatten() + 1).tolist()
        for start, end in zip([0] + edges, edges + [codes.numel()]):
            number = int(sources[start])
            if not 0 <= number < len(group) or number in used:
                return None
            used.add(number)
            key = group[number]
            info = infos[key]
            block = rows[start:end]
            if (list(param.shape[1:]) != info["shape"][1:] or int(block.min()) < 0
                    or int(block.max()) >= info["shape"][0]):
                return None
            moves.append((key, where, (start, end), _runs(block), info["dtype"]))
    return moves


def _probe(group, infos, adapter, adapter_kwargs, model, torch):
    """The destinations of one layer's tensors (_decode's moves) if its adapters only move rows,
    else None."""
    found = []
    for mirrored in (False, True):
        probes = {}
        for number, key in enumerate(group):
            shape = infos[key]["shape"]
            if not shape or shape[0] >= 1 << (_ROW_BITS - 1):
                return None
            probes[key] = _probe_values(number, shape[0], mirrored, torch).reshape([shape[0]] + [1] * (len(shape) - 1))
        try:
            adapted = adapter(probes, **adapter_kwargs)
        except Exception:  # an adapter that needs real values or shapes: FMS's own path
            return None
        moves = _decode(adapted, group, infos, model, mirrored, torch)
        if moves is None:
            return None
        found.append(moves)
    if found[0] != found[1]:
        return None
    # One dtype per parameter, as FMS allocates it: the load's, else the checkpoint tensor's.
    by_param: dict = {}
    for _, where, _, _, stored in found[0]:
        by_param.setdefault((id(where[0]), where[1]), set()).add(stored)
    if any(len(dtypes) > 1 for dtypes in by_param.values()):
        return None
    return found[0]


_TORCH_DTYPE_NAMES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64", "I8": "int8",
                      "U8": "uint8", "I16": "int16", "I32": "int32", "I64": "int64", "BOOL": "bool",
                      "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


def _fill(model, state_dict: _StateDict, architecture, source, dtype, initial_device, adapter_kwargs) -> dict:
    """Fills `model` from the checkpoint: row moves straight into parameters through
    qload.load_into, other layers through FMS's own adapters and copies."""
    import torch
    from fms.utils import serialization

    adapter = serialization._get_adapter(architecture, source)
    infos = {t["name"]: t for t in _inspect(state_dict.path)["tensors"]}
    keys = set(state_dict.keys())
    used: set = set()
    destinations, fallback = {}, []
    with torch.no_grad():
        for key in sorted(keys):
            if key in used:
                continue
            group = [key] + sorted(serialization._find_key_neighbors(key, keys - used - {key}))
            used.update(group)
            moves = _probe(group, infos, adapter, adapter_kwargs, model, torch)
            if moves is None:
                fallback.append(group)
                continue
            for name, (module, attr), (o0, o1), ranges, stored in moves:
                param = getattr(module, attr)
                if param.device.type == "meta":  # allocated as FMS's _move_to_real_device does
                    wanted = dtype if dtype is not None else getattr(torch, _TORCH_DTYPE_NAMES.get(stored, ""), None)
                    if wanted is None:
                        fallback.append([name])
                        continue
                    param = serialization._move_to_real_device(param, initial_device, wanted)
                    setattr(module, attr, param)
                    param = getattr(module, attr)
                target = param.data[o0:o1]
                whole = ranges == [(0, infos[name]["shape"][0])]
                destinations[name] = target if whole else (target, ranges)
        report = _load_into(state_dict.path, destinations, progress=False) if destinations else {}
        for group in fallback:  # FMS's own path, group by group, from qload's mapped tensors
            partial = {k: state_dict[k].to(device=initial_device) for k in group}
            adapted = adapter(partial, **adapter_kwargs)
            serialization._load_partial_state_dict(model=model, state_dict=adapted, needs_tp_sharding=False,
                                                   dtype=dtype)
            for k in group:
                del state_dict[k]
    for name in destinations:
        if name in state_dict:
            del state_dict[name]
    return {"report": report, "into_parameters": sorted(destinations),
            "through_fms": sorted(k for group in fallback for k in group)}


def load_state_dict_into_model(model, state_dict, architecture, source, dtype=None, distributed_strategy=None,
                               checkpoint_sharding=None, initial_device=None, rank=0, key_prefix_filter=None,
                               **kwargs):
    """fms.utils.serialization.load_state_dict_into_model's contract: a checkpoint read through
    qload fills the parameters directly; anything else goes to FMS's own function."""
    import torch

    initial_device = torch.device("cpu") if initial_device is None else torch.device(initial_device)
    tensor_parallel = distributed_strategy == "tp" and checkpoint_sharding != "tp"
    if (not isinstance(state_dict, _StateDict) or tensor_parallel or key_prefix_filter is not None
            or initial_device.type == "meta" or kwargs):
        return _original_into_model(model, state_dict, architecture, source, dtype=dtype,
                                    distributed_strategy=distributed_strategy,
                                    checkpoint_sharding=checkpoint_sharding, initial_device=initial_device, rank=rank,
                                    key_prefix_filter=key_prefix_filter, **kwargs)
    adapter_kwargs: dict = {}
    if hasattr(model, "config"):
        adapter_kwargs["model_config"] = model.config
    if hasattr(model, "_vision_only"):
        adapter_kwargs["vision_only"] = model._vision_only
    outcome = _fill(model, state_dict, architecture, source, dtype, initial_device, adapter_kwargs)
    if _on_report is not None:
        _on_report(outcome)


def install(on_report: Optional[Callable[[dict], None]] = None) -> None:
    """Makes FMS read safetensors checkpoints through qload from now on.

    on_report, if given, is called after each model is filled with {"report": qload's load report,
    "into_parameters": checkpoint tensors read straight into parameters, "through_fms": those
    that went through FMS's own adapters and copies}."""
    global _original_state_dict, _original_into_model, _on_report
    from fms.utils import serialization

    if _original_state_dict is None:
        _original_state_dict = serialization.load_state_dict
        _original_into_model = serialization.load_state_dict_into_model
    serialization.load_state_dict = load_state_dict
    serialization.load_state_dict_into_model = load_state_dict_into_model
    _on_report = on_report


def uninstall() -> None:
    global _original_state_dict, _original_into_model, _on_report
    if _original_state_dict is not None:
        from fms.utils import serialization

        serialization.load_state_dict = _original_state_dict
        serialization.load_state_dict_into_model = _original_into_model
        _original_state_dict = _original_into_model = _on_report = None


@contextlib.contextmanager
def loading(on_report: Optional[Callable[[dict], None]] = None):
    """Within the block, FMS reads safetensors checkpoints through qload (see install)."""
    installed_before = _original_state_dict is not None
    install(on_report)
    try:
        yield
    finally:
        if not installed_before:
            uninstall()

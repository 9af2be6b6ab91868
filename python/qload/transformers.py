"""qload.transformers: a Hugging Face transformers model, ready, with each weight read once.

    import qload.transformers
    model = qload.transformers.from_pretrained("llama/")            # AutoModelForCausalLM
    model = qload.transformers.from_pretrained("llama/", dtype=torch.float32, device="cuda:0")
    model = qload.transformers.from_pretrained("Qwen/Qwen2-0.5B")  # from the Hugging Face cache

The model is built with its parameters on the meta device (no memory, no random init). On a
CPU, parameters stored in the model's dtype become views of private mappings of the files, as
transformers' own loader maps them (verified by their XXH3 digests as they are mapped); every
other parameter (converted, or on a GPU) is allocated once, uninitialized, where it will live,
and qload reads the checkpoint's bytes straight into it (converted to the model's dtype where
they differ): no state dict in between, no second copy. Buffers the model computes itself (rotary frequencies) are
made by the model's own constructor, as in transformers. Tied weights stay tied and are read
once.

A checkpoint that lacks a parameter of the model is refused (NotFoundError naming it) rather
than left random; checkpoint tensors the model has no parameter for are not read.
"""
from __future__ import annotations

import json
import os
from typing import Optional


def _local_folder(path: str, config_kwargs: dict) -> str:
    """`path`, or a Hugging Face model id's snapshot in the local cache (qload.resolve), with the
    `revision` and `cache_dir` that AutoConfig.from_pretrained would take from config_kwargs."""
    from . import resolve

    revision = config_kwargs.get("revision")
    if revision is not None and "@" not in path and not os.path.exists(path):
        path = f"{path}@{revision}"
    return resolve(path, cache_dir=config_kwargs.get("cache_dir"))


def _stored_dtype(path: str):
    """The checkpoint's floating dtype, for dtype="auto" (config.json's torch_dtype / dtype first)."""
    import torch

    from . import inspect

    config = os.path.join(path, "config.json")
    if os.path.isfile(config):
        with open(config) as f:
            named = json.load(f)
        for key in ("dtype", "torch_dtype"):
            if isinstance(named.get(key), str) and hasattr(torch, named[key]):
                return getattr(torch, named[key])
    by_name = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
    for t in inspect(path)["tensors"]:
        if t["dtype"] in by_name:
            return by_name[t["dtype"]]
    return torch.float32


def _materialize(model, device) -> None:
    """Every meta parameter allocated (uninitialized) on `device`; tied parameters stay one."""
    import torch

    made: dict = {}
    for module in model.modules():
        for name, param in list(module._parameters.items()):
            if param is None or not param.is_meta:
                continue
            if id(param) not in made:
                made[id(param)] = torch.nn.Parameter(torch.empty_like(param, device=device),
                                                     requires_grad=param.requires_grad)
            module._parameters[name] = made[id(param)]


def _map_parameters(model, path: str, settings: Optional[dict], progress) -> dict:
    """Meta parameters whose checkpoint tensor has their dtype and shape become views of qload's
    private (copy-on-write) mappings of the files: no memory of their own, the page cache's pages
    shared, as transformers' own loader does on a CPU. Returns the load's report."""
    import torch

    from . import load

    mapped = load(path, settings={**(settings or {}), "load_mode": "mmap"}, progress=progress)
    done: dict = {}
    for name, param in model.state_dict(keep_vars=True).items():
        owner, _, leaf = name.rpartition(".")
        module = model.get_submodule(owner) if owner else model
        if id(param) in done:  # tied: the tensor mapped for its first name
            module._parameters[leaf] = done[id(param)]
            continue
        stored = mapped.get(name)
        if (not isinstance(param, torch.nn.Parameter) or not param.is_meta or stored is None
                or stored.dtype != param.dtype or stored.shape != param.shape):
            continue
        done[id(param)] = module._parameters[leaf] = torch.nn.Parameter(stored, requires_grad=param.requires_grad)
    return mapped.report


def from_pretrained(path, model_class=None, *, dtype="auto", device: str = "cpu", mapped: Optional[bool] = None,
                    settings: Optional[dict] = None, progress=None, **config_kwargs):
    """A ready transformers model (eval mode) of the checkpoint at `path`, each weight read once.

    model_class: a transformers class with from_config (default AutoModelForCausalLM);
    dtype: a torch dtype, or "auto" (the checkpoint's); device: "cpu" or "cuda:N";
    mapped (default: on a cpu device): parameters stored in the model's dtype are views of
    private mappings of the files (shared with the page cache, copied on write), as
    transformers maps them; the others (converted, or on a GPU) are allocated once and read into
    by load_into. config_kwargs go to AutoConfig.from_pretrained. Returns the model; its
    `qload_report` is the load's report (and `qload_mapped_report` the mapping's, if any).
    """
    import torch
    import transformers
    from accelerate import init_empty_weights

    from . import load_into

    path = _local_folder(os.fspath(path), config_kwargs)
    if model_class is None:
        model_class = transformers.AutoModelForCausalLM
    config = transformers.AutoConfig.from_pretrained(path, **config_kwargs)
    if dtype == "auto":
        dtype = _stored_dtype(path)
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch dtype or 'auto', not {dtype!r}")
    with init_empty_weights(include_buffers=False):  # parameters on meta; buffers computed as usual
        model = model_class.from_config(config, dtype=dtype)
    if hasattr(model, "tie_weights"):
        model.tie_weights()  # before allocating, so tied parameters are one tensor
    if mapped is None:
        mapped = torch.device(device).type == "cpu"
    if mapped and torch.device(device).type != "cpu":
        raise ValueError(f"mapped parameters live in host memory: device {device!r} needs mapped=False")
    mapped_report = _map_parameters(model, path, settings, progress) if mapped else None
    meta_left = any(p.is_meta for p in model.parameters())  # to read into, once allocated
    _materialize(model, torch.device(device))
    model.to(device)  # the buffers the constructor computed (on cpu)
    report = load_into(path, model, settings=settings, progress=progress) if not mapped or meta_left else mapped_report
    model.qload_report = report
    model.qload_mapped_report = mapped_report
    generation = os.path.join(path, "generation_config.json")
    if os.path.isfile(generation) and getattr(model, "can_generate", lambda: False)():
        model.generation_config = transformers.GenerationConfig.from_pretrained(path)
    return model.eval()

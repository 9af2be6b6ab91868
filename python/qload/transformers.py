"""qload.transformers: a Hugging Face transformers model, ready, with each weight read once.

    import qload.transformers
    model = qload.transformers.from_pretrained("llama/")            # AutoModelForCausalLM
    model = qload.transformers.from_pretrained("llama/", dtype=torch.float32, device="cuda:0")

transformers' own from_pretrained builds the model, then reads every checkpoint tensor into
memory of its own and copies it into the parameter. Here the model is built with its parameters
on the meta device (no memory, no random init), each parameter is allocated once, uninitialized,
where it will live, and qload reads the checkpoint's bytes straight into it (converted to the
model's dtype where they differ). Buffers the model computes itself (rotary frequencies) are
made by the model's own constructor, as in transformers. Tied weights stay tied and are read
once.

A checkpoint that lacks a parameter of the model is refused (NotFoundError naming it) rather
than left random; checkpoint tensors the model has no parameter for are not read.
"""
from __future__ import annotations

import json
import os
from typing import Optional


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


def from_pretrained(path, model_class=None, *, dtype="auto", device: str = "cpu",
                    settings: Optional[dict] = None, progress=None, **config_kwargs):
    """A ready transformers model (eval mode) of the checkpoint at `path`, its weights read by
    qload straight into its parameters.

    model_class: a transformers class with from_config (default AutoModelForCausalLM);
    dtype: a torch dtype, or "auto" (the checkpoint's); device: "cpu" or "cuda:N";
    config_kwargs go to AutoConfig.from_pretrained. Returns the model; its `qload_report` is
    the load's report.
    """
    import torch
    import transformers
    from accelerate import init_empty_weights

    from . import load_into

    path = os.fspath(path)
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
    _materialize(model, torch.device(device))
    model.to(device)  # the buffers the constructor computed (on cpu)
    report = load_into(path, model, settings=settings, progress=progress)
    model.qload_report = report
    generation = os.path.join(path, "generation_config.json")
    if os.path.isfile(generation) and getattr(model, "can_generate", lambda: False)():
        model.generation_config = transformers.GenerationConfig.from_pretrained(path)
    return model.eval()

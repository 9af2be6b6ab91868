"""vLLM's --load-format qload plugin against vLLM's own default loader.

vLLM's PyPI wheel is a CUDA build: without a GPU its platform is unspecified and it cannot
build a model, so here the plugin is checked where it changes anything: it registers as
`--load-format qload`, and the (name, tensor) pairs it hands a model's load_weights equal those
vLLM's default safetensors loader hands it. A whole `LLM(model, load_format="qload")` run
needs a GPU machine (see docs/python.md).
"""
import types

import pytest
import torch

vllm = pytest.importorskip("vllm")

import qload.vllm  # noqa: E402


def loaders():
    from vllm.config.load import LoadConfig
    from vllm.model_executor.model_loader import get_model_loader
    from vllm.model_executor.model_loader.default_loader import DefaultModelLoader

    qload.vllm.register()
    return get_model_loader(LoadConfig(load_format="qload")), DefaultModelLoader(LoadConfig(load_format="safetensors"))


def test_load_format_qload_is_registered():
    ours, _ = loaders()
    assert type(ours).__name__ == "QloadModelLoader"


def test_weights_equal_the_default_loaders(tiny_model):
    ours, theirs = loaders()
    model_config = types.SimpleNamespace(model=tiny_model, revision=None, quantization=None)
    model = torch.nn.Module()
    got = {}
    for name, tensor in ours.get_all_weights(model_config, model):
        assert name not in got
        got[name] = tensor
    want = dict(theirs.get_all_weights(model_config, model))
    assert set(got) == set(want)
    for name, t in want.items():
        assert got[name].dtype == t.dtype and got[name].shape == t.shape and torch.equal(got[name], t), name

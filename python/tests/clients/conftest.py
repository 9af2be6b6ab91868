"""Tiny models built and saved by transformers, as users' checkpoints are."""
import os
import subprocess

import pytest
import torch


def save_tiny(kind: str, tied: bool, path) -> str:
    """A random llama- or granite-shaped model in bf16, saved by save_pretrained (safetensors)."""
    import transformers

    torch.manual_seed(1234)
    shape = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=320, tie_word_embeddings=tied)
    if kind == "llama":
        config, model_class = transformers.LlamaConfig(**shape), transformers.LlamaForCausalLM
    else:
        config, model_class = transformers.GraniteConfig(**shape), transformers.GraniteForCausalLM
    model = model_class(config).to(torch.bfloat16)
    model.save_pretrained(str(path), safe_serialization=True)
    return str(path)


MODELS = [("llama", False), ("llama", True), ("granite", False)]


@pytest.fixture(params=MODELS, ids=[f"{k}-{'tied' if t else 'untied'}" for k, t in MODELS])
def tiny_model(request, tmp_path):
    kind, tied = request.param
    return save_tiny(kind, tied, tmp_path / f"{kind}-{'tied' if tied else 'untied'}")


@pytest.fixture
def qload_cli():
    return os.environ["QLOAD_CLI"]


def convert(cli: str, source: str, out, quantize: str) -> str:
    subprocess.run([cli, "convert", source, str(out), "--quantize", quantize], check=True, stdout=subprocess.DEVNULL)
    return str(out)

"""GPTQ checkpoints quantized and read back by GPTQModel itself: qload's dequantization must equal
GPTQModel's own (`dequantize_weight` of each quantized module, loaded on the CPU with its torch
kernel), value for value, for each way a v1 file stores its zero points (docs/formats.md,
"GPTQ version").

GPTQModel quantizes a tiny llama (4-bit, group 128, asymmetric, no act-order) on the CPU. Two of
its projections are made all-positive first: their groups' true zero point is 0, which is where
the two v1 conventions part (GPTQModel writes z - 1 by whole 32-bit words, borrowing into the
field above; AutoGPTQ-style readers take each field alone).
"""
import json
import os
import shutil

import pytest
import safetensors.torch
import torch

import qload
from tiny_models import save_tiny

# GPTQModel sizes its CPU worker pools from the core count, and refuses fewer than 2.
os.environ.setdefault("GPTQMODEL_CPU_WORKERS", "2")

POSITIVE = ("model.layers.0.mlp.gate_proj", "model.layers.1.self_attn.q_proj")


def _with_tokenizer(model_dir: str) -> None:
    """GPTQModel loads a tokenizer with the model: a word-level one over the tiny vocabulary."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(318)} | {"<unk>": 318, "<s>": 319}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="<s>",
                            pad_token="<unk>").save_pretrained(model_dir)


@pytest.fixture(scope="module")
def gptqmodel_checkpoint(tmp_path_factory):
    """(checkpoint dir as GPTQModel saved it, GPTQModel's dequantized weights [N, K] f16, its
    true (v2) zero points per module)."""
    from gptqmodel import BACKEND, GPTQModel, QuantizeConfig
    from gptqmodel.nn_modules.qlinear import BaseQuantLinear

    base = save_tiny("llama", False, tmp_path_factory.mktemp("base") / "llama")
    weights = safetensors.torch.load_file(os.path.join(base, "model.safetensors"))
    for name in weights:
        if name.startswith(POSITIVE):
            weights[name] = weights[name].abs()
    safetensors.torch.save_file(weights, os.path.join(base, "model.safetensors"), metadata={"format": "pt"})
    _with_tokenizer(base)

    out = str(tmp_path_factory.mktemp("gptqmodel") / "w4g128-asym")
    model = GPTQModel.load(base, QuantizeConfig(bits=4, group_size=128, sym=False, desc_act=False), device="cpu")
    torch.manual_seed(0)
    calibration = [{"input_ids": torch.randint(0, 318, (1, 64)), "attention_mask": torch.ones(1, 64, dtype=torch.long)}
                   for _ in range(8)]
    model.quantize(calibration, batch_size=1)
    model.save(out)
    del model

    loaded = GPTQModel.load(out, device="cpu", backend=BACKEND.TORCH, dtype=torch.float16)
    theirs, zeros = {}, {}
    for name, module in loaded.model.named_modules():
        if isinstance(module, BaseQuantLinear):
            theirs[name + ".weight"] = module.dequantize_weight().T.contiguous()
            zeros[name] = module.qzeros.detach().clone()  # converted to v2 (true zero points) on load
    assert len(theirs) == 14
    return out, theirs, zeros


def _differing(out_dir: str, theirs: dict, **settings) -> int:
    ours = qload.load(out_dir, dequantize="f16", framework="pt", settings=settings or None)
    for name, want in theirs.items():
        assert ours[name].dtype == want.dtype and ours[name].shape == want.shape, name
    return sum(int((ours[name] != want).sum()) for name, want in theirs.items())


def test_gptqmodel_v1_file_dequantizes_as_gptqmodel_does(gptqmodel_checkpoint):
    out, theirs, _ = gptqmodel_checkpoint
    config = json.loads(open(os.path.join(out, "config.json")).read())["quantization_config"]
    assert config["checkpoint_format"] == "gptq" and config["sym"] is False
    assert any(q.startswith("gptqmodel") for q in config["meta"]["quantizer"])
    described = qload.load(out, framework="pt").quantized
    assert all(q["bits"] == 4 and q["group_size"] == 128 and not q["symmetric"] for q in described)

    assert _differing(out, theirs) == 0  # auto: GPTQModel's whole-word reading
    assert _differing(out, theirs, gptq_v1_zeros="whole-word") == 0
    # Read per field, the groups whose true zero is 0 decode wrong: the fixture has them.
    assert _differing(out, theirs, gptq_v1_zeros="per-field") > 10000


def _rewrite_zeros(src: str, dst, zeros: dict, checkpoint_format: str) -> str:
    """GPTQModel's checkpoint with each module's true zero points stored as `checkpoint_format`
    says: v2 as they are, v1 as (z - 1) per 4-bit field (what AutoGPTQ-style readers expect), and
    no `meta.quantizer`, as other writers leave it."""
    shutil.copytree(src, dst)
    tensors = safetensors.torch.load_file(os.path.join(dst, "model.safetensors"))
    shifts = torch.arange(0, 32, 4, dtype=torch.int32)
    for module, words in zeros.items():
        fields = (words.unsqueeze(-1) >> shifts) & 0xF
        if checkpoint_format == "gptq":
            fields = (fields - 1) & 0xF
        tensors[module + ".qzeros"] = (fields << shifts).sum(-1, dtype=torch.int64).to(torch.int32)
    safetensors.torch.save_file(tensors, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    for name in ("config.json", "quantize_config.json"):
        path = os.path.join(dst, name)
        data = json.loads(open(path).read())
        config = data.get("quantization_config", data)
        config["checkpoint_format"] = config["format"] = checkpoint_format
        config.pop("meta", None)
        open(path, "w").write(json.dumps(data))
    return str(dst)


@pytest.mark.parametrize("checkpoint_format", ["gptq", "gptq_v2"])
def test_per_field_v1_and_v2_files_dequantize_as_gptqmodel_does(gptqmodel_checkpoint, tmp_path, checkpoint_format):
    out, theirs, zeros = gptqmodel_checkpoint
    rewritten = _rewrite_zeros(out, tmp_path / checkpoint_format, zeros, checkpoint_format)
    assert _differing(rewritten, theirs) == 0  # auto: per field without GPTQModel's meta; v2 as stored
    if checkpoint_format == "gptq":
        assert _differing(rewritten, theirs, gptq_v1_zeros="per-field") == 0
        assert _differing(rewritten, theirs, gptq_v1_zeros="whole-word") > 10000

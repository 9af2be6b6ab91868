"""GPTQ and AWQ checkpoints packed by vLLM's own quantization utilities
(quantized_checkpoints.py): qload's dequantization must equal vLLM's reference weights value
for value."""
import warnings

import pytest
import torch

import qload
from quantized_checkpoints import awq_checkpoint, gptq_checkpoint
from tiny_models import save_tiny

warnings.filterwarnings("ignore")


@pytest.fixture(scope="module")
def base_model(tmp_path_factory):
    return save_tiny("llama", False, tmp_path_factory.mktemp("base") / "llama")


def assert_dequantizes_to(out_dir, reference: dict, scheme: str) -> None:
    packed = qload.load(str(out_dir), framework="pt").quantized
    assert sorted(q["name"] for q in packed) == sorted(reference)
    assert {q["scheme"].split("-")[0] for q in packed} == {scheme}
    model = qload.load(str(out_dir), dequantize="f16", framework="pt")
    for name, want in reference.items():
        got = model[name]
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert torch.equal(got, want), f"{name}: {(got != want).sum().item()} of {want.numel()} values differ"


@pytest.mark.parametrize("bits,group,act_order", [(4, 128, False), (4, 64, True), (8, 128, False)],
                         ids=["4bit-g128", "4bit-g64-act-order", "8bit-g128"])
def test_gptq_packed_by_vllm_dequantizes_to_vllms_reference(base_model, tmp_path, bits, group, act_order):
    reference = gptq_checkpoint(base_model, tmp_path / "gptq", bits, group, act_order)
    assert_dequantizes_to(tmp_path / "gptq", reference, "gptq")


@pytest.mark.parametrize("group", [128, 64])
def test_awq_packed_by_vllm_dequantizes_to_vllms_reference(base_model, tmp_path, group):
    reference = awq_checkpoint(base_model, tmp_path / "awq", group)
    assert_dequantizes_to(tmp_path / "awq", reference, "awq")

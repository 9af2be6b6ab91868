"""IBM FMS loading through qload: the same weights, bit-identical logits."""
import pytest
import torch

pytest.importorskip("fms")
from fms.models import get_model  # noqa: E402
from fms.utils import serialization  # noqa: E402

import qload.fms  # noqa: E402


def fms_model(path):
    return get_model("hf_pretrained", model_path=path, device_type="cpu", data_type=torch.bfloat16)


def test_fms_through_qload_gives_identical_logits(tiny_model):
    calls = []
    original = qload.fms.load_state_dict

    def counting(*args, **kwargs):
        calls.append(args[0])
        return original(*args, **kwargs)

    theirs = fms_model(tiny_model)
    with qload.fms.loading():
        assert serialization.load_state_dict is qload.fms.load_state_dict
        qload.fms.load_state_dict = counting  # see that FMS really came through qload
        serialization.load_state_dict = counting
        try:
            ours = fms_model(tiny_model)
        finally:
            qload.fms.load_state_dict = original
    assert calls, "FMS did not call qload's load_state_dict"
    assert serialization.load_state_dict is not counting and serialization.load_state_dict is not original

    sd_ours, sd_theirs = ours.state_dict(), theirs.state_dict()
    assert set(sd_ours) == set(sd_theirs)
    for name, want in sd_theirs.items():
        assert torch.equal(sd_ours[name], want), name
    tokens = torch.tensor([[1, 5, 9, 17, 33, 65, 129, 257, 300, 2, 7, 11]])
    with torch.no_grad():
        assert torch.equal(ours(tokens), theirs(tokens))


def test_meta_device_and_other_ranks_get_nothing(tiny_model):
    assert qload.fms.load_state_dict(tiny_model, initial_device=torch.device("meta")) == {}
    with qload.fms.loading():
        assert qload.fms.load_state_dict(tiny_model, distributed_strategy="fsdp", rank=1) == {}
        sd = qload.fms.load_state_dict(tiny_model, source="hf")
        assert "model.embed_tokens.weight" in sd


@pytest.mark.parametrize("scheme", ["W4A16", "FP8_BLOCK", "fine-grained-fp8"])
def test_quantized_checkpoints_reach_fms_as_fms_reads_them(tiny_model, tmp_path, scheme):
    """FMS's quantized linear types (GPTQ through auto_gptq, FP8 through fms-mo) take the
    packed parts of a quantized checkpoint from the state dict: through qload they get the same
    names and bytes as from FMS's own reader. (Running those linears needs their GPU kernels.)"""
    from test_quantized_libraries import compressed_tensors_checkpoint, transformers_fp8_checkpoint

    out = tmp_path / "q"
    if scheme == "fine-grained-fp8":
        transformers_fp8_checkpoint(tiny_model, out, [128, 128])
    else:
        compressed_tensors_checkpoint(tiny_model, out, scheme)
    theirs = serialization.load_state_dict(str(out), source="hf")
    ours = qload.fms.load_state_dict(str(out), source="hf")
    assert set(ours) == set(theirs)
    packed = [n for n in theirs if n.endswith(("weight_packed", "weight_scale", "weight_scale_inv"))
              or theirs[n].dtype == torch.float8_e4m3fn]
    assert packed, "no quantized parts in the checkpoint"
    for name in theirs:
        want = theirs[name]
        assert ours[name].dtype == want.dtype and ours[name].shape == want.shape, name
        assert torch.equal(ours[name].view(torch.uint8), want.view(torch.uint8)), name

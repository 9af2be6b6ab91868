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

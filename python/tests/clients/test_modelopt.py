"""NVFP4 checkpoints exported by NVIDIA ModelOpt itself: a tiny llama quantized with
`mtq.NVFP4_DEFAULT_CFG` (calibrated on random tokens, on the CPU) and written by
`export_hf_checkpoint`, as NVIDIA's published FP4 checkpoints are. qload's dequantization must
equal ModelOpt's own (`NVFP4QTensor.dequantize` on the exported weight, weight_scale and
weight_scale_2), value for value, in f32 and bf16."""
import json
import os
import warnings

import pytest
import safetensors.torch
import torch

import qload
from tiny_models import save_tiny


@pytest.fixture(scope="module")
def modelopt_checkpoint(tmp_path_factory):
    import transformers
    import modelopt.torch.quantization as mtq
    from modelopt.torch.export import export_hf_checkpoint

    base = save_tiny("llama", False, tmp_path_factory.mktemp("base") / "llama")
    out = tmp_path_factory.mktemp("modelopt") / "nvfp4"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.bfloat16)

        def forward_loop(m):
            torch.manual_seed(0)
            for _ in range(4):
                m(torch.randint(0, 320, (1, 32)))

        mtq.quantize(model, mtq.NVFP4_DEFAULT_CFG, forward_loop)
        export_hf_checkpoint(model, export_dir=str(out))
    return str(out)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_modelopt_nvfp4_dequantizes_as_modelopt_does(modelopt_checkpoint, dtype):
    from modelopt.torch.quantization.qtensor import NVFP4QTensor

    config = json.loads(open(os.path.join(modelopt_checkpoint, "hf_quant_config.json")).read())
    assert config["quantization"]["quant_algo"] == "NVFP4"
    stored = safetensors.torch.load_file(os.path.join(modelopt_checkpoint, "model.safetensors"))
    prefixes = sorted(k[: -len(".weight_scale_2")] for k in stored if k.endswith(".weight_scale_2"))
    assert len(prefixes) == 14  # every projection of both layers

    packed = qload.load(modelopt_checkpoint, framework="pt").quantized
    assert sorted(q["name"] for q in packed) == [p + ".weight" for p in prefixes]
    assert {(q["scheme"], q["bits"], q["group_size"]) for q in packed} == {("nvfp4", 4, 16)}

    torch_dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype]
    ours = qload.load(modelopt_checkpoint, dequantize=dtype, framework="pt")
    for p in prefixes:
        w = stored[p + ".weight"]
        q = NVFP4QTensor(torch.Size((w.shape[0], w.shape[1] * 2)), torch_dtype, w)
        want = q.dequantize(dtype=torch_dtype, scale=stored[p + ".weight_scale"],
                            double_scale=stored[p + ".weight_scale_2"], block_sizes={-1: 16})
        got = ours[p + ".weight"]
        assert got.dtype == want.dtype and got.shape == want.shape, p
        assert torch.equal(got, want), f"{p}: {(got != want).sum().item()} of {want.numel()} values differ"
    assert "lm_head.weight" in ours and ours["lm_head.weight"].dtype == torch.bfloat16  # excluded: plain

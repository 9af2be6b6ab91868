"""Quantized checkpoints written by the libraries that own their formats: qload's dequantization
must equal the library's own, value for value.

- compressed-tensors: a tiny model saved by transformers is quantized with compressed-tensors'
  own scheme presets, qparams (calculate_qparams), compressors and config writer (the path
  llm-compressor takes when it saves), then decompressed by compressed-tensors for the
  reference. The same parts stacked as MoE experts ([E, ...], vLLM's fused-MoE layout) must
  dequantize to the library's decompressions stacked the same way.
- bitsandbytes 4-bit: a tiny model quantized on load by transformers with BitsAndBytesConfig
  (NF4 and FP4, with and without double quantization; bitsandbytes runs on the CPU) and saved by
  save_pretrained (as safetensors and as pytorch_model.bin); the reference is bitsandbytes' own
  `dequantize_4bit` of each module's weight.
- transformers' fine-grained FP8: weights quantized by transformers' own `Fp8Quantize`
  conversion op (what `FineGrainedFP8Config` runs when it quantizes a model on load, which
  transformers only does on a GPU), written with the config transformers writes, and read back
  by transformers itself on CPU (`dequantize=True`) for the reference.

The only thing computed here rather than by the library is each group's min and max, which
llm-compressor's min-max observer would compute the same way.
"""
import copy
import json
import os
import warnings

import pytest
import safetensors.torch
import torch

import qload
from tiny_models import save_tiny

CT_SCHEMES = ["W4A16", "W4A16_ASYM", "W8A16", "W8A8", "FP8", "FP8_DYNAMIC", "FP8_BLOCK", "NVFP4A16", "NVFP4",
              "MXFP4A16"]


def _observed_min_max(weight: torch.Tensor, args):
    """Min and max over each quantization group of `weight` ([N, K]), shaped like the scale."""
    from compressed_tensors.quantization import QuantizationStrategy as S

    w = weight.float()
    if args.strategy == S.TENSOR:
        return w.amin().reshape(1), w.amax().reshape(1)
    if args.strategy == S.CHANNEL:
        return w.amin(dim=1, keepdim=True), w.amax(dim=1, keepdim=True)
    if args.strategy in (S.GROUP, S.TENSOR_GROUP):
        groups = w.unflatten(-1, (-1, args.group_size))
        return groups.amin(-1), groups.amax(-1)
    if args.strategy == S.BLOCK:
        bn, bk = args.block_structure
        n, k = w.shape
        blocks = w.reshape(n // bn, bn, k // bk, bk)
        return blocks.amin(dim=(1, 3)), blocks.amax(dim=(1, 3))
    raise AssertionError(f"no observer here for strategy {args.strategy}")


def _quiet_model(model_dir: str):
    import transformers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)


def compressed_tensors_checkpoint(base_dir: str, out_dir, scheme_name: str) -> dict:
    """Quantizes every Linear but lm_head with compressed-tensors' preset `scheme_name`, saves
    the compressed model to `out_dir`, and returns compressed-tensors' own decompression of it."""
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import QuantizationConfig, apply_quantization_config, preset_name_to_scheme
    from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam

    model = _quiet_model(base_dir)
    config = QuantizationConfig(config_groups={"group_0": preset_name_to_scheme(scheme_name, ["Linear"])},
                                ignore=["lm_head"])
    apply_quantization_config(model, config)
    with torch.no_grad():
        for module in model.modules():
            if getattr(module, "quantization_scheme", None) is None:
                continue
            args = module.quantization_scheme.weights
            global_scale = None
            if hasattr(module, "weight_global_scale"):  # NVFP4: from the whole tensor's range, as llm-compressor
                w = module.weight.float()
                global_scale = generate_gparam(w.amin(), w.amax())
                module.weight_global_scale.copy_(global_scale.reshape(module.weight_global_scale.shape))
            scale, zero_point = calculate_qparams(*_observed_min_max(module.weight, args), args,
                                                  global_scale=global_scale)
            module.weight_scale.copy_(scale.reshape(module.weight_scale.shape))
            if hasattr(module, "weight_zero_point"):
                module.weight_zero_point.copy_(zero_point.reshape(module.weight_zero_point.shape))
            if hasattr(module, "input_scale"):  # static activation schemes: any positive value
                module.input_scale.fill_(0.25)
            if hasattr(module, "input_global_scale"):
                module.input_global_scale.fill_(448.0 * 6.0)
    compressor = ModelCompressor.from_pretrained_model(model)
    compressor.compress_model(model)
    model.save_pretrained(str(out_dir))
    compressor.update_config(str(out_dir))
    compressor.decompress_model(model)
    return {name: t.detach().clone() for name, t in model.state_dict().items() if name.endswith(".weight")}


@pytest.fixture(scope="module")
def base_model(tmp_path_factory):
    return save_tiny("llama", False, tmp_path_factory.mktemp("base") / "llama")


@pytest.mark.parametrize("scheme", CT_SCHEMES)
def test_compressed_tensors_checkpoint_dequantizes_as_compressed_tensors_does(base_model, tmp_path, scheme):
    out = tmp_path / scheme
    theirs = compressed_tensors_checkpoint(base_model, out, scheme)
    quant = json.loads((out / "config.json").read_text())["quantization_config"]
    assert quant["quant_method"] == "compressed-tensors"

    # Kept packed: every projection is described with the scheme's bits and group.
    packed = qload.load(str(out), framework="pt").quantized
    assert sorted(q["name"] for q in packed) == sorted(n for n in theirs if "proj" in n)
    args = next(iter(quant["config_groups"].values()))["weights"]
    assert {q["bits"] for q in packed} == {args["num_bits"]}

    model = qload.load(str(out), dequantize="bf16", framework="pt")
    for name, want in theirs.items():
        got = model[name]
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert torch.equal(got, want), f"{scheme}: {name} differs in {(got != want).sum().item()} of {want.numel()} values"
    # Every projection really went through the library's quantizer: decoded != original.
    original = safetensors.torch.load_file(os.path.join(base_model, "model.safetensors"))
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(model[q], original[q])
    check_stacked_experts(out, tmp_path / f"{scheme}-experts", theirs)


def check_stacked_experts(compressed_dir, out_dir, theirs: dict) -> None:
    """The 4 gate/up projections of the 2 layers, every stored part stacked along a new leading
    dim (vLLM's fused-MoE layout), must dequantize to compressed-tensors' own decompressions of
    those modules, stacked the same way."""
    stored = safetensors.torch.load_file(os.path.join(compressed_dir, "model.safetensors"))
    modules = [f"model.layers.{layer}.mlp.{proj}" for layer in (0, 1) for proj in ("gate_proj", "up_proj")]
    suffixes = sorted(name[len(modules[0]) + 1:] for name in stored if name.startswith(modules[0] + "."))
    assert "weight" in suffixes or "weight_packed" in suffixes
    stacked = "model.layers.0.mlp.experts.gate_up_proj"
    out_dir.mkdir()
    safetensors.torch.save_file({f"{stacked}.{s}": torch.stack([stored[f"{m}.{s}"] for m in modules])
                                 for s in suffixes}, str(out_dir / "model.safetensors"))
    (out_dir / "config.json").write_text((compressed_dir / "config.json").read_text())
    packed = qload.load(str(out_dir), framework="pt").quantized
    assert [(q["name"], q["experts"], q["rows"]) for q in packed] == [(f"{stacked}.weight", 4, 4 * 512)]
    got = qload.load(str(out_dir), dequantize="bf16", framework="pt")[f"{stacked}.weight"]
    want = torch.stack([theirs[f"{m}.weight"] for m in modules])
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got, want), f"stacked experts differ in {(got != want).sum().item()} of {want.numel()} values"


def transformers_fp8_checkpoint(base_dir: str, out_dir, block) -> None:
    """Quantizes every Linear but lm_head with transformers' own fine-grained FP8 op and writes
    the checkpoint with the quantization_config transformers writes for it."""
    from transformers import FineGrainedFP8Config
    from transformers.integrations.finegrained_fp8 import Fp8Quantize

    class Quantizer:  # what Fp8Quantize reads of transformers' FP8 quantizer
        quantization_config = FineGrainedFP8Config(weight_block_size=block)

    op = Fp8Quantize(Quantizer())
    original = safetensors.torch.load_file(os.path.join(base_dir, "model.safetensors"))
    tensors = {}
    for name, t in original.items():
        if name.endswith("proj.weight"):
            tensors.update(op.convert({name: t}))
        else:
            tensors[name] = t
    assert any(t.dtype == torch.float8_e4m3fn for t in tensors.values())
    os.makedirs(out_dir)
    safetensors.torch.save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    config = json.load(open(os.path.join(base_dir, "config.json")))
    config["quantization_config"] = Quantizer.quantization_config.to_dict()
    config["quantization_config"]["modules_to_not_convert"] = ["lm_head"]
    json.dump(config, open(os.path.join(out_dir, "config.json"), "w"))


@pytest.mark.parametrize("block", [(128, 128), (64, 128)], ids=["128x128", "64x128"])
def test_transformers_fine_grained_fp8_dequantizes_as_transformers_does(base_model, tmp_path, block):
    from transformers import AutoModelForCausalLM, FineGrainedFP8Config

    out = tmp_path / "fp8"
    transformers_fp8_checkpoint(base_model, out, list(block))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = AutoModelForCausalLM.from_pretrained(
            str(out), dtype=torch.bfloat16,
            quantization_config=FineGrainedFP8Config(weight_block_size=list(block), dequantize=True)).state_dict()
    ours = qload.load(str(out), dequantize="bf16", framework="pt")
    original = safetensors.torch.load_file(os.path.join(base_model, "model.safetensors"))
    for name in original:
        assert ours[name].shape == theirs[name].shape, name
        assert torch.equal(ours[name], theirs[name]), f"{name} differs in {(ours[name] != theirs[name]).sum().item()} values"
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(ours[q], original[q])


@pytest.mark.parametrize("dtype", ["bf16", "f32"])
def test_mxfp4_experts_dequantize_as_transformers_does(tmp_path, dtype):
    """gpt-oss's MXFP4 experts (`*_blocks` E2M1 pairs, `*_scales` E8M0, config quant_method
    "mxfp4"), dequantized by transformers' own `convert_moe_packed_tensors` (what it runs to load
    gpt-oss without an MXFP4 kernel): qload's [E, N, K] is transformers' [E, K, N] transposed."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    gen = torch.Generator().manual_seed(4)
    experts, rows, groups = 3, 40, 6  # K = 192
    tensors = {
        "model.layers.0.mlp.experts.gate_up_proj_blocks":
            torch.randint(0, 256, (experts, rows, groups, 16), generator=gen, dtype=torch.uint8),
        "model.layers.0.mlp.experts.gate_up_proj_scales":
            torch.randint(100, 140, (experts, rows, groups), generator=gen, dtype=torch.uint8),
        "model.layers.0.mlp.experts.gate_up_proj_bias": torch.randn(experts, rows, generator=gen),
    }
    safetensors.torch.save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": "gpt_oss", "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": []}}))
    torch_dtype = {"bf16": torch.bfloat16, "f32": torch.float32}[dtype]
    want = convert_moe_packed_tensors(tensors["model.layers.0.mlp.experts.gate_up_proj_blocks"],
                                      tensors["model.layers.0.mlp.experts.gate_up_proj_scales"], dtype=torch_dtype)
    got = qload.load(tmp_path, dequantize=dtype)
    weight = got["model.layers.0.mlp.experts.gate_up_proj"]
    assert weight.shape == (experts, rows, groups * 32) and weight.dtype == torch_dtype
    assert torch.equal(weight.transpose(1, 2).contiguous().view(torch.int16 if dtype == "bf16" else torch.int32),
                       want.view(torch.int16 if dtype == "bf16" else torch.int32))
    assert torch.equal(got["model.layers.0.mlp.experts.gate_up_proj_bias"],
                       tensors["model.layers.0.mlp.experts.gate_up_proj_bias"])


@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
@pytest.mark.parametrize("double", [True, False], ids=["double-quant", "plain-absmax"])
@pytest.mark.parametrize("as_bin", [False, True], ids=["safetensors", "bin"])
def test_bitsandbytes_4bit_dequantizes_as_bitsandbytes_does(base_model, tmp_path, quant_type, double, as_bin):
    import bitsandbytes
    import bitsandbytes.functional as F
    import transformers

    config = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=quant_type,
                                             bnb_4bit_use_double_quant=double, bnb_4bit_compute_dtype=torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.AutoModelForCausalLM.from_pretrained(base_model, quantization_config=config,
                                                                  device_map="cpu")
        model.save_pretrained(str(tmp_path / "bnb"))
    if as_bin:  # what transformers 4 wrote with safe_serialization=False: torch.save of the same tensors
        from safetensors.torch import load_file

        saved = tmp_path / "bnb" / "model.safetensors"
        torch.save(load_file(str(saved)), tmp_path / "bnb" / "pytorch_model.bin")
        saved.unlink()
        assert qload.inspect(str(tmp_path / "bnb"))["format"] == "pytorch"
    theirs = {}
    for name, module in model.named_modules():
        if isinstance(module, bitsandbytes.nn.Linear4bit):
            theirs[name + ".weight"] = F.dequantize_4bit(module.weight.data, module.weight.quant_state)
    assert len(theirs) == 14
    described = {q["name"]: q for q in qload.load(str(tmp_path / "bnb")).quantized}
    assert sorted(described) == sorted(theirs)
    for dtype, torch_dtype in (("bf16", torch.bfloat16), ("f32", torch.float32)):
        ours = qload.load(str(tmp_path / "bnb"), dequantize=dtype)
        for name, want in theirs.items():
            got = ours[name]
            assert got.shape == want.shape and got.dtype == torch_dtype, name
            if torch_dtype == torch.float32:  # bitsandbytes' f32 decode of the same state
                weight = model.get_submodule(name[: -len(".weight")]).weight
                state = copy.copy(weight.quant_state)
                state.dtype = torch.float32
                want = F.dequantize_4bit(weight.data, state)
            assert torch.equal(got, want), f"{name} ({dtype}) differs in {(got != want).sum().item()} values"


def test_bitsandbytes_8bit_dequantizes_as_bitsandbytes_does(base_model, tmp_path):
    import bitsandbytes
    import bitsandbytes.functional as F
    import transformers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.AutoModelForCausalLM.from_pretrained(
            base_model, quantization_config=transformers.BitsAndBytesConfig(load_in_8bit=True), device_map="cpu")
        model.save_pretrained(str(tmp_path / "int8"))
    theirs = {name + ".weight": F.int8_vectorwise_dequant(module.weight.data, module.weight.SCB)
              for name, module in model.named_modules() if isinstance(module, bitsandbytes.nn.Linear8bitLt)}
    assert len(theirs) == 14
    assert sorted(q["name"] for q in qload.load(str(tmp_path / "int8")).quantized) == sorted(theirs)
    ours = qload.load(str(tmp_path / "int8"), dequantize="f32")
    for name, want in theirs.items():
        assert torch.equal(ours[name], want), f"{name} differs in {(ours[name] != want).sum().item()} values"


def test_llama4_fbgemm_fp8_experts_dequantize_per_output_channel(tmp_path):
    """Llama-4's FP8 MoE experts as transformers' FbgemmFp8Llama4TextExperts holds them
    (quant_method fbgemm_fp8): `gate_up_proj` [E, H, 2I] with `gate_up_proj_scale` [E, 1, 2I] and
    `down_proj` [E, I, H] with `down_proj_scale` [E, H, 1], each expert stored transposed and
    scaled per output channel. fbgemm's kernels need a GPU, so the reference is torch's own f32
    arithmetic on the same tensors: code times its channel's scale, in the stored orientation
    (what transformers' bf16 Llama4TextExperts holds)."""
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(11)
    experts, hidden, inter = 4, 64, 48
    p = "language_model.model.layers.0.feed_forward.experts."
    gate_up = torch.randn(experts, hidden, 2 * inter, generator=gen)
    down = torch.randn(experts, inter, hidden, generator=gen)
    gate_up_scale = gate_up.abs().amax(dim=1, keepdim=True) / 448  # [E, 1, 2I]
    down_scale = (down.abs().amax(dim=1, keepdim=True) / 448).transpose(1, 2).contiguous()  # [E, H, 1]
    tensors = {
        p + "gate_up_proj": (gate_up / gate_up_scale).to(torch.float8_e4m3fn),
        p + "gate_up_proj_scale": gate_up_scale,
        p + "down_proj": (down / down_scale.transpose(1, 2)).to(torch.float8_e4m3fn),
        p + "down_proj_scale": down_scale,
        "language_model.model.layers.0.feed_forward.router.weight": torch.randn(experts, hidden, generator=gen),
    }
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": {
        "quant_method": "fbgemm_fp8", "modules_to_not_convert": ["language_model.model.layers.0.feed_forward.router"]}}))
    want = {
        p + "gate_up_proj": tensors[p + "gate_up_proj"].float() * gate_up_scale,
        p + "down_proj": tensors[p + "down_proj"].float() * down_scale.transpose(1, 2),
    }
    kept = {q["name"]: q for q in qload.load(str(tmp_path)).quantized}
    assert sorted(kept) == sorted(want)
    assert all(q["experts"] == experts for q in kept.values())
    for dtype, torch_dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        got = qload.load(str(tmp_path), dequantize=dtype)
        for name, reference in want.items():
            assert got[name].shape == reference.shape and got[name].dtype == torch_dtype, name
            assert torch.equal(got[name], reference.to(torch_dtype)), f"{name} ({dtype})"

"""qload against torch and transformers on checkpoints transformers wrote."""
import glob
import pathlib
import os
import warnings

import pytest
import safetensors.torch
import torch

import qload
import qload.torch
from conftest import convert


def reference(model_dir: str) -> dict:
    out = {}
    for f in sorted(glob.glob(os.path.join(model_dir, "*.safetensors"))):
        out.update(safetensors.torch.load_file(f))
    return out


def assert_same(ours: dict, theirs: dict) -> None:
    assert set(ours) == set(theirs)
    for name, want in theirs.items():
        got = ours[name]
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert torch.equal(got, want), name


def test_load_pt_equals_safetensors_torch(tiny_model):
    assert_same(qload.load(tiny_model, framework="pt"), reference(tiny_model))


def test_torch_load_file_equals_safetensors(tiny_model):
    f = glob.glob(os.path.join(tiny_model, "*.safetensors"))[0]
    assert_same(qload.torch.load_file(f), safetensors.torch.load_file(f))


def test_safe_open_pt_equals_safetensors(tiny_model):
    f = glob.glob(os.path.join(tiny_model, "*.safetensors"))[0]
    with safetensors.safe_open(f, framework="pt") as theirs, qload.safe_open(f, framework="pt") as ours:
        assert ours.keys() == theirs.keys()
        assert ours.metadata() == theirs.metadata()
        for k in theirs.keys():
            assert torch.equal(ours.get_tensor(k), theirs.get_tensor(k)), k
            assert torch.equal(ours.get_slice(k)[0:3], theirs.get_slice(k)[0:3]), k


def test_stream_pt_yields_every_tensor(tiny_model):
    assert_same(dict(qload.stream(tiny_model, framework="pt")), reference(tiny_model))


def transformers_weights(model_dir: str, quantize: str) -> dict:
    """What transformers makes of a quantized checkpoint: its dequantized state dict."""
    from transformers import AutoModelForCausalLM

    kwargs = {}
    if quantize == "fp8:block":  # transformers' fine-grained FP8, dequantized (no GPU here)
        from transformers import FineGrainedFP8Config

        kwargs["quantization_config"] = FineGrainedFP8Config(weight_block_size=(128, 128), dequantize=True)
    else:  # compressed-tensors, decompressed into dense weights
        from transformers.utils.quantization_config import CompressedTensorsConfig

        kwargs["quantization_config"] = CompressedTensorsConfig(run_compressed=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16, **kwargs)
    return model.state_dict()


@pytest.mark.parametrize("quantize", ["fp8:per-tensor", "fp8:block", "int8"])
def test_convert_output_loads_in_transformers_as_qload_dequantizes_it(tiny_model, qload_cli, tmp_path, quantize):
    out = convert(qload_cli, tiny_model, tmp_path / "converted", quantize)
    ours = qload.load(out, dequantize="bf16", framework="pt")
    theirs = transformers_weights(out, quantize)
    original = reference(tiny_model)
    # Every weight of the original model, as transformers decoded it and as qload did.
    # (transformers' state dict may also keep quantization bookkeeping such as weight_scale.)
    for name in original:
        assert name in theirs and name in ours, name
        assert ours[name].shape == theirs[name].shape and torch.equal(ours[name], theirs[name]), name
    # And something was quantized: the decoded projections differ from the bf16 originals.
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(ours[q], original[q])
    assert torch.allclose(ours[q].float(), original[q].float(), atol=0.05, rtol=0.15)


def test_int8_convert_output_with_odd_sizes_loads_in_transformers_as_qload_dequantizes_it(qload_cli, tmp_path):
    """K 130 and 350: not multiples of the four int8 values a packed word holds, so
    compressed-tensors pads each row's last word and weight_shape alone gives K."""
    import transformers

    torch.manual_seed(5)
    config = transformers.LlamaConfig(hidden_size=130, intermediate_size=350, num_hidden_layers=1,
                                      num_attention_heads=1, num_key_value_heads=1, vocab_size=64)
    transformers.LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(str(tmp_path / "odd"))
    out = convert(qload_cli, str(tmp_path / "odd"), tmp_path / "converted", "int8")
    packed = safetensors.torch.load_file(os.path.join(out, "model.safetensors"))
    assert packed["model.layers.0.mlp.down_proj.weight_packed"].shape == (130, 88)
    ours = qload.load(out, dequantize="bf16", framework="pt")
    theirs = transformers_weights(out, "int8")
    for name in reference(str(tmp_path / "odd")):
        assert torch.equal(ours[name], theirs[name]), name
    assert ours["model.layers.0.mlp.down_proj.weight"].shape == (130, 350)


@pytest.mark.parametrize("mapped", [True, False], ids=["mapped", "load_into"])
def test_from_pretrained_through_qload_gives_identical_logits_with_each_weight_read_once(tiny_model, mapped):
    """qload.transformers.from_pretrained: the model transformers builds, its parameters mapped
    from the files (cpu default) or read straight into them (no state dict in between), logits
    bit-identical to transformers' own from_pretrained; tied embeddings stay tied, read once."""
    import transformers

    import qload.transformers

    theirs = transformers.AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.bfloat16).eval()
    ours = qload.transformers.from_pretrained(tiny_model, mapped=mapped)
    assert (ours.qload_mapped_report is not None) == mapped
    assert type(ours) is type(theirs)
    sd_ours, sd_theirs = ours.state_dict(), theirs.state_dict()
    assert set(sd_ours) == set(sd_theirs)
    for name, want in sd_theirs.items():
        assert sd_ours[name].dtype == want.dtype and torch.equal(sd_ours[name], want), name
    tied = theirs.config.tie_word_embeddings
    assert (ours.lm_head.weight.data_ptr() == ours.model.embed_tokens.weight.data_ptr()) == tied
    stored = {t["name"] for t in qload.inspect(tiny_model)["tensors"]}
    assert ours.qload_report["tensors"] == len(stored)
    if not mapped:
        assert ours.qload_report["missing"] == []
    tokens = torch.tensor([[1, 5, 9, 17, 33, 65, 129, 257, 300, 2, 7, 11]])
    with torch.no_grad():
        assert torch.equal(ours(tokens).logits, theirs(tokens).logits)
    # Another dtype: converted on load, as transformers casts.
    ours32 = qload.transformers.from_pretrained(tiny_model, dtype=torch.float32, mapped=mapped)
    theirs32 = transformers.AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).eval()
    with torch.no_grad():
        assert torch.equal(ours32(tokens).logits, theirs32(tokens).logits)


def test_from_pretrained_refuses_a_checkpoint_missing_a_parameter(tiny_model, tmp_path):
    import shutil

    import qload.transformers

    tensors = safetensors.torch.load_file(glob.glob(os.path.join(tiny_model, "*.safetensors"))[0])
    del tensors["model.norm.weight"]
    out = tmp_path / "partial"
    shutil.copytree(tiny_model, out)
    for f in glob.glob(str(out / "*.safetensors")):
        os.remove(f)
    safetensors.torch.save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(qload.NotFoundError, match="model.norm.weight"):
        qload.transformers.from_pretrained(out)


def docs_block(heading: str) -> str:
    """The first fenced block after `heading` in docs/python.md, as a user would copy it."""
    doc = (pathlib.Path(__file__).resolve().parents[3] / "docs" / "python.md").read_text()
    section = doc[doc.index(heading):]
    start = section.index("```python\n") + len("```python\n")
    return section[start:section.index("```\n", start)]


def test_the_coming_from_transformers_recipe_runs(tmp_path, monkeypatch):
    """docs/python.md's recipe, run as written in a folder holding the llama/ it names."""
    from tiny_models import save_tiny

    save_tiny("llama", False, tmp_path / "llama")
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(docs_block("### Coming from transformers"), "docs/python.md", "exec"), namespace)
    assert hasattr(namespace["model"], "qload_report")  # loaded through qload, not by transformers

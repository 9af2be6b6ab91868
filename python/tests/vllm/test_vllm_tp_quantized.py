"""--load-format qload under tensor parallelism on quantized checkpoints: each rank reads only
the packed rows or columns, scales and zero points its weight loaders keep, and gets the
parameters vLLM's default loader gives the same rank.

The checkpoints: GPTQ and AWQ packed by vLLM's own quantization utilities
(quantized_checkpoints.py), and what `qload convert --quantize` writes for each target (FP8
128x128 blocks as HF `fp8`, FP8 per channel as `fbgemm_fp8`, FP8 per tensor and int8 per channel
as compressed-tensors). The layers are vLLM's, built with the quantization config vLLM parses
from each checkpoint's config.json, so the parameters (PackedvLLMParameter,
GroupQuantScaleParameter, BlockQuantScaleParameter, ...) and their weight loaders are vLLM's
own, as is the name mapping that drops GPTQ's g_idx.

What does not run here: without a GPU, vLLM has no kernel for these layers (Marlin, CUTLASS,
Machete...) and refuses to build them, so `no_kernels` answers vLLM's kernel choice with a
class that does nothing. A kernel is used only by the forward pass and by
process_weights_after_loading, which vLLM's load_model calls after the weights are loaded:
neither is reached by these tests, which compare the parameters as loaded. Serving these
checkpoints needs a GPU machine.
"""
import json
import subprocess

import pytest
import torch

vllm = pytest.importorskip("vllm")

import qload  # noqa: E402
from quantized_checkpoints import awq_checkpoint, gptq_checkpoint  # noqa: E402
from tiny_models import save_tiny  # noqa: E402
from vllm_llama import assert_read_once, assert_reads_only, load, loaders, read_bytes  # noqa: E402


@pytest.fixture(scope="module")
def base_model(tmp_path_factory):
    """hidden 512, head size 128: FP8's 128x128 blocks divide every projection's part at tp 2."""
    return save_tiny("llama", False, tmp_path_factory.mktemp("base") / "llama", hidden_size=512)


def checkpoint(kind: str, base: str, out, cli: str) -> str:
    """GPTQ 4-bit and AWQ with groups of 64, or `qload convert --quantize kind`."""
    if kind == "gptq":
        gptq_checkpoint(base, out, 4, 64, False)
    elif kind == "awq":
        awq_checkpoint(base, out, 64)
    else:
        subprocess.run([cli, "convert", "--quantize", kind, base, str(out)], check=True, stdout=subprocess.DEVNULL)
    return str(out)


def quant_config(path: str):
    """vLLM's quantization config for the checkpoint, parsed from its config.json as vLLM does."""
    from vllm.model_executor.layers.quantization import get_quantization_config

    qc = json.load(open(f"{path}/config.json"))["quantization_config"]
    return get_quantization_config(qc["quant_method"]).from_config(qc)


# The part each projection's weight is stored in, whose region shows the projection was cut.
ANCHORS = {"gptq": "qweight", "awq": "qweight", "int8": "weight_packed"}
KINDS = [("gptq", 2), ("gptq", 4), ("awq", 2), ("awq", 4), ("fp8:block", 2), ("fp8:per-channel", 2),
         ("fp8:per-tensor", 2), ("int8", 2)]


@pytest.mark.parametrize("kind,tp", KINDS, ids=[f"{k}-tp{tp}" for k, tp in KINDS])
def test_each_rank_reads_its_part_of_a_quantized_checkpoint(base_model, tmp_path, qload_cli, no_kernels, tp_rank,
                                                             kind, tp):
    path = checkpoint(kind, base_model, tmp_path / kind.replace(":", "-"), qload_cli)
    stored = {t["name"]: t for t in qload.inspect(path)["tensors"]}
    whole = sum(t["nbytes"] for t in stored.values())
    anchor = ANCHORS.get(kind, "weight")
    for rank in range(tp):
        tp_rank(rank, tp)
        ours, theirs = loaders({"qload": {"max_gap_bytes": 1024, "load_mode": "read"}})
        got = load(ours, path, quant_config=quant_config(path))
        want = load(theirs, path, quant_config=quant_config(path))
        params = dict(want.named_parameters())
        assert set(dict(got.named_parameters())) == set(params)
        for name, p in got.named_parameters():
            q = params[name]
            assert p.dtype == q.dtype and p.shape == q.shape, f"rank {rank}: {name}"
            # bit for bit (FP8 has no torch.equal)
            assert torch.equal(p.flatten().view(torch.uint8), q.flatten().view(torch.uint8)), f"rank {rank}: {name}"
        regions = ours.qload_regions
        projections = [n for n in stored if n.endswith(f"_proj.{anchor}")]
        assert projections and all(regions.get(n) for n in projections), (rank, kind)
        if kind == "gptq":  # vLLM drops g_idx (no act-order kernel): never read
            assert all(regions[n] is None for n in stored if n.endswith(".g_idx"))
        # Read straight into the parameters: every projection's packed weight (GPTQ's and AWQ's
        # column-parallel parts are columns of the fused parameters: rows a pitch apart), and
        # every scale and zero point matrix the rank keeps, converted where vLLM's parameter is
        # of another float dtype (compressed-tensors' F32 scales). A per-tensor scale is one
        # element of vLLM's per-shard vector: it is streamed.
        parts = {n for n, t in stored.items() if len(t["shape"]) == 2 and regions.get(n, ()) is not None
                 and n.rpartition(".")[2] in (anchor, "scales", "qzeros", "weight_scale", "weight_scale_inv")}
        assert projections and parts >= set(projections)
        assert parts <= set(ours.qload_into), (rank, kind, sorted(parts - set(ours.qload_into)))
        assert_read_once(ours, stored)
        read = read_bytes(ours)
        assert_reads_only(regions, stored, read)
        # The column-parallel projections' packed rows are 1-4 KiB here: 4 KiB-aligned reads take
        # most of each, which a real model's rows (tens of KiB) do not.
        assert read < whole * (0.8 if tp == 2 else 0.7), (rank, read, whole)
        print(f"{kind} tp {tp} rank {rank}: read {read / whole:.3f} of the checkpoint")


def test_a_destination_qload_refuses_is_streamed(base_model, tmp_path, qload_cli, no_kernels, tp_rank, monkeypatch):
    """A destination qload refuses when it checks them (here each F32 weight_scale's parameter
    seen as int16, a dtype no float converts into: qload's own check refuses it, naming the
    tensor, before anything is read) is streamed instead, and after a few refusals every tensor
    is; the parameters are the default loader's either way."""
    import qload.vllm

    path = checkpoint("int8", base_model, tmp_path / "int8", qload_cli)
    stored = {t["name"]: t for t in qload.inspect(path)["tensors"]}
    scales = {n for n, t in stored.items() if n.endswith(".weight_scale") and t["dtype"] == "F32"}
    assert scales
    real = qload.vllm._load_into
    refusals = []

    def through_int16(folder, destinations, **kwargs):
        def seen(name, d):
            if name not in scales:
                return d
            target, region = d if isinstance(d, tuple) else (d, None)
            target = target.view(torch.int16)
            return target if region is None else (target, region)
        try:
            return real(folder, {n: seen(n, d) for n, d in destinations.items()}, **kwargs)
        except qload.InvalidArgumentError as e:
            refusals.append(e.tensor)
            raise

    monkeypatch.setattr(qload.vllm, "_load_into", through_int16)
    tp_rank(1, 2)
    for allowed in (len(scales), len(scales) - 1):
        monkeypatch.setattr(qload.vllm, "_REFUSALS", allowed)
        refusals.clear()
        ours, theirs = loaders({"qload": {"max_gap_bytes": 1024, "load_mode": "read"}})
        got = load(ours, path, quant_config=quant_config(path))
        want = dict(load(theirs, path, quant_config=quant_config(path)).named_parameters())
        for name, p in got.named_parameters():
            assert torch.equal(p.flatten().view(torch.uint8), want[name].flatten().view(torch.uint8)), name
        into = set(ours.qload_into)
        assert set(refusals) <= scales and len(refusals) == min(allowed + 1, len(scales))
        if allowed == len(scales):
            assert into and not into & scales and {n for n in stored if n.endswith("weight_packed")} <= into
        else:
            assert into == set() and ours.qload_into_report is None
        assert_read_once(ours, stored)

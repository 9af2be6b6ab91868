"""--load-format qload on a mixture of experts (Mixtral, saved by transformers with each
expert's w1, w2 and w3 stored apart): under tensor parallelism each rank reads its rows or
columns of every expert, under expert parallelism only its own experts, and either way it gets
the parameters vLLM's default loader gives the same rank.

The model is vLLM's MixtralMoE (FusedMoE's routed experts, loaded by their own load_weights,
which views each expert's weight as a stack of one, `unsqueeze(0).unbind()`, before the weight
loader cuts it or, for another rank's expert, returns) with the llama attention of
vllm_llama.py, in a world of this one process with the tensor-parallel rank emulated. vLLM's
MoE kernel backend is chosen by platform (none without a GPU) and answered "CPU" (bf16) or
Triton (FP8, conftest.no_kernels): the weights load; no forward pass runs. The same checkpoint
converted by `qload convert --quantize fp8:block` (experts and attention in 128x128 blocks,
routers kept) goes through vLLM's Fp8MoEMethod, each rank reading its part of every expert's
weight and weight_scale_inv.
"""
import json
import subprocess

import pytest
import torch

vllm = pytest.importorskip("vllm")

import qload  # noqa: E402
from vllm_llama import assert_read_once, assert_reads_only, load, loaders, read_bytes  # noqa: E402


@pytest.fixture(scope="module")
def mixtral(tmp_path_factory):
    import transformers

    torch.manual_seed(1234)
    # Head size 128: FP8's 128x128 blocks divide every projection's part at tp 2.
    config = transformers.MixtralConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                        num_attention_heads=2, num_key_value_heads=1, vocab_size=320,
                                        num_local_experts=4, num_experts_per_tok=2)
    path = tmp_path_factory.mktemp("mixtral") / "mixtral"
    transformers.MixtralForCausalLM(config).to(torch.bfloat16).save_pretrained(str(path))
    return str(path)


def expert_of(name: str):
    parts = name.split(".")
    return int(parts[parts.index("experts") + 1]) if "experts" in parts else None


@pytest.fixture(scope="module")
def mixtral_fp8(mixtral, tmp_path_factory):
    """`qload convert --quantize fp8:block`: experts and attention in 128x128 FP8 blocks, the
    routers (block_sparse_moe.gate) left as they are, as vLLM builds them."""
    import os

    out = tmp_path_factory.mktemp("mixtral-fp8") / "fp8"
    subprocess.run([os.environ["QLOAD_TEST_CLI"], "convert", "--quantize", "fp8:block", mixtral, str(out)], check=True,
                   stdout=subprocess.DEVNULL)
    return str(out)


def quant_config(path: str):
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.layers.quantization import get_quantization_config

    import vllm_llama

    qc = json.load(open(f"{path}/config.json"))["quantization_config"]
    with set_current_vllm_config(vllm_llama.vllm_config(torch.bfloat16, moe=True)):
        return get_quantization_config(qc["quant_method"]).from_config(qc)


CASES = [("bf16", False), ("bf16", True), ("fp8-block", False), ("fp8-block", True)]


@pytest.mark.parametrize("kind,expert_parallel", CASES,
                         ids=[f"{k}-{'expert-parallel' if ep else 'experts-cut'}" for k, ep in CASES])
def test_each_rank_reads_its_part_of_the_experts(mixtral, mixtral_fp8, tp_rank, no_kernels, kind, expert_parallel):
    path = mixtral if kind == "bf16" else mixtral_fp8
    quantized = quant_config(path) if kind != "bf16" else None
    stored = {t["name"]: t for t in qload.inspect(path)["tensors"]}
    whole = sum(t["nbytes"] for t in stored.values())
    experts = [n for n in stored if expert_of(n) is not None]
    # layers x experts x (w1, w2, w3), and with FP8 each one's weight_scale_inv
    assert len(experts) == 2 * 4 * 3 * (1 if kind == "bf16" else 2)
    if quantized is not None:  # the routers are not quantized
        assert stored["model.layers.0.block_sparse_moe.gate.weight"]["dtype"] == "BF16"
    for rank in range(2):
        tp_rank(rank, 2)
        ours, theirs = loaders({"qload": {"max_gap_bytes": 1024, "load_mode": "read"}})
        got = load(ours, path, quant_config=quantized, expert_parallel=expert_parallel)
        want = load(theirs, path, quant_config=quantized, expert_parallel=expert_parallel)
        params = dict(want.named_parameters())
        assert set(dict(got.named_parameters())) == set(params)
        assert any("w13_weight" in n for n in params)
        for name, p in got.named_parameters():
            q = params[name]
            assert p.dtype == q.dtype and p.shape == q.shape, f"rank {rank}: {name}"
            assert torch.equal(p.flatten().view(torch.uint8), q.flatten().view(torch.uint8)), f"rank {rank}: {name}"
        regions = ours.qload_regions
        for name in experts:
            if not expert_parallel:  # w1 and w3: rows of the intermediate size; w2: its columns
                dim = 1 if ".w2." in name else 0
                part = 256 if name.endswith(".weight") else 2  # elements, or 128x128 blocks' scales
                assert regions[name] == (dim, part * rank, part * (rank + 1)), (rank, name)
            elif expert_of(name) // 2 == rank:  # this rank's experts, whole
                assert name not in regions, (rank, name)
            else:  # another rank's: not read at all
                assert regions[name] is None, (rank, name)
        # Every part the rank keeps (FP8's weight_scale_inv too) is read straight into the experts'
        # parameters and the attention's.
        assert set(ours.qload_into) == {n for n in stored if regions.get(n, ()) is not None}, rank
        assert_read_once(ours, stored)
        read = read_bytes(ours)
        assert_reads_only(regions, stored, read)
        assert read < whole * (0.55 if expert_parallel else 0.7), (rank, read, whole)

"""--load-format qload on a mixture of experts (Mixtral, saved by transformers with each
expert's w1, w2 and w3 stored apart): under tensor parallelism each rank reads its rows or
columns of every expert, under expert parallelism only its own experts, and either way it gets
the parameters vLLM's default loader gives the same rank.

The model is vLLM's MixtralMoE (FusedMoE's routed experts, loaded by their own load_weights,
which views each expert's weight as a stack of one, `unsqueeze(0).unbind()`, before the weight
loader cuts it or, for another rank's expert, returns) with the llama attention of
vllm_llama.py, in a world of this one process with the tensor-parallel rank emulated. vLLM's
MoE kernel backend is chosen by platform (none without a GPU) and answered "CPU": the weights
load; no forward pass runs.
"""
import pytest
import torch

vllm = pytest.importorskip("vllm")

import qload  # noqa: E402
from vllm_llama import assert_reads_only, load, loaders  # noqa: E402


@pytest.fixture(scope="module")
def mixtral(tmp_path_factory):
    import transformers

    torch.manual_seed(1234)
    config = transformers.MixtralConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, vocab_size=320,
                                        num_local_experts=4, num_experts_per_tok=2)
    path = tmp_path_factory.mktemp("mixtral") / "mixtral"
    transformers.MixtralForCausalLM(config).to(torch.bfloat16).save_pretrained(str(path))
    return str(path)


def expert_of(name: str):
    parts = name.split(".")
    return int(parts[parts.index("experts") + 1]) if "experts" in parts else None


@pytest.mark.parametrize("expert_parallel", [False, True], ids=["experts-cut", "expert-parallel"])
def test_each_rank_reads_its_part_of_the_experts(mixtral, tp_rank, expert_parallel):
    stored = {t["name"]: t for t in qload.inspect(mixtral)["tensors"]}
    whole = sum(t["nbytes"] for t in stored.values())
    experts = [n for n in stored if expert_of(n) is not None]
    assert len(experts) == 2 * 4 * 3  # layers x experts x (w1, w2, w3)
    for rank in range(2):
        tp_rank(rank, 2)
        ours, theirs = loaders({"qload": {"max_gap_bytes": 1024, "load_mode": "read"}})
        got = load(ours, mixtral, expert_parallel=expert_parallel)
        want = load(theirs, mixtral, expert_parallel=expert_parallel)
        params = dict(want.named_parameters())
        assert set(dict(got.named_parameters())) == set(params)
        assert any("w13_weight" in n for n in params)
        for name, p in got.named_parameters():
            assert p.dtype == params[name].dtype and torch.equal(p, params[name]), f"rank {rank}: {name}"
        regions = ours.qload_regions
        for name in experts:
            if not expert_parallel:  # w1 and w3: rows of the intermediate size; w2: its columns
                dim = 1 if name.endswith("w2.weight") else 0
                assert regions[name] == (dim, 256 * rank, 256 * (rank + 1)), (rank, name)
            elif expert_of(name) // 2 == rank:  # this rank's experts, whole
                assert name not in regions, (rank, name)
            else:  # another rank's: not read at all
                assert regions[name] is None, (rank, name)
        read = ours.qload_report["read_bytes"]
        assert_reads_only(regions, stored, read)
        assert read < whole * (0.55 if expert_parallel else 0.7), (rank, read, whole)

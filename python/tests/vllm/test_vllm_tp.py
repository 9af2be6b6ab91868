"""--load-format qload under tensor parallelism: each rank reads only the rows or columns its
weight loaders keep, straight into vLLM's parameters where a loader only narrows and copies
(qload.load_into; the stream reads the rest), and gets the parameters vLLM's default loader
gives the same rank.

vLLM's CUDA wheel cannot build a whole model without a GPU, so the model here is the llama
layout assembled from vLLM's own layers (QKVParallelLinear, MergedColumnParallelLinear,
RowParallelLinear, VocabParallelEmbedding, ParallelLMHead, RMSNorm) and loaded by vLLM's own
AutoWeightsLoader with LlamaModel's name mapping: the loading code a LlamaForCausalLM runs.
Rank r of tp is emulated in one process by giving vLLM's layers that rank and size when they
ask for them (vllm_llama.py). The tiny models have 4 heads and 2 kv heads (replicated at tp 4)
and a vocabulary of 320 (even parts); one of 130, padded to 192, gives uneven and empty ones.
"""
import pytest
import torch

vllm = pytest.importorskip("vllm")

import qload.vllm  # noqa: E402
import vllm_llama  # noqa: E402
from vllm_llama import assert_read_once, assert_reads_only, load, loaders, read_bytes  # noqa: E402


PROJECTIONS = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "o_proj", "down_proj")


@pytest.mark.parametrize("tp", [2, 4])
def test_each_rank_reads_its_part_and_gets_the_default_loaders_parameters(tiny_model, tp_rank, tp):
    stored = {t["name"]: t for t in qload.inspect(tiny_model)["tensors"]}
    whole = sum(t["nbytes"] for t in stored.values())
    for rank in range(tp):
        tp_rank(rank, tp)
        # max_gap_bytes 1 KiB: the parts of a tensor that other ranks keep (32 KiB and more here)
        # are not read through as gaps between reads (by default, gaps under 64 KiB are, which
        # in this tiny model would be most), so that the bytes read can be counted.
        ours, theirs = loaders({"qload": {"max_gap_bytes": 1024, "load_mode": "read"}})
        got, want = load(ours, tiny_model), load(theirs, tiny_model)
        params = dict(want.named_parameters())
        assert set(dict(got.named_parameters())) == set(params)
        for name, p in got.named_parameters():
            assert p.dtype == params[name].dtype and torch.equal(p, params[name]), f"rank {rank}: {name}"
        # Every projection is cut: rows of the column-parallel ones, columns of o_proj and
        # down_proj; so is the vocabulary.
        regions = ours.qload_regions
        assert all(regions.get(n) for n in stored if any(p in n for p in PROJECTIONS)), rank
        assert all(regions.get(n) for n in stored if "embed_tokens" in n or "lm_head" in n), rank
        assert_read_once(ours, stored)
        read = read_bytes(ours)
        assert_reads_only(regions, stored, read)
        assert read < whole * (0.7 if tp == 2 else 0.55), (rank, read, whole)


class Copies(torch.overrides.TorchFunctionMode):
    """Counts the copies (`copy_`) made under it: of memory onto itself, and the others."""

    onto_itself = others = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") == "copy_" and args[1].device.type != "meta":
            if args[0].data_ptr() == args[1].data_ptr() and args[0].shape == args[1].shape:
                self.onto_itself += 1
            else:
                self.others += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_each_rank_reads_straight_into_its_parameters(tiny_model, tp_rank, tp):
    """Every projection, the embeddings and the norms are read by load_into into the vLLM
    parameters (their part of them) and not by the stream; the weight loaders still get each
    tensor, and the parameters are the default loader's."""
    stored = {t["name"]: t for t in qload.inspect(tiny_model)["tensors"]}
    for rank in range(tp):
        tp_rank(rank, tp)
        ours, theirs = loaders({"qload": {"max_gap_bytes": 1024, "load_mode": "read"}})
        with Copies() as copies:
            got = load(ours, tiny_model)
        want = load(theirs, tiny_model)
        params = dict(want.named_parameters())
        assert set(dict(got.named_parameters())) == set(params)
        for name, p in got.named_parameters():
            assert p.dtype == params[name].dtype and torch.equal(p, params[name]), f"rank {rank}: {name}"
        # Each weight loader's copy was of a parameter's memory onto itself.
        assert copies.onto_itself == len(stored) and copies.others == 0, (copies.onto_itself, copies.others)
        into = set(ours.qload_into)
        assert {n for n in stored if any(p in n for p in PROJECTIONS + ("embed_tokens", "lm_head"))} <= into, rank
        assert into == set(stored), rank  # the norms too (vLLM's default_weight_loader)
        assert ours.qload_into_report["tensors"] == len(into)
        assert ours.qload_report["placed_bytes"] == 0 and ours.qload_report["read_bytes"] == 0, rank
        assert_read_once(ours, stored)


def test_mapped_ranks_get_the_default_loaders_parameters(tiny_model, tp_rank):
    """load_mode mmap: each rank's parts are views of the files (vLLM copies them once, as from
    its own loader's mappings); only whole tensors are hashed."""
    for rank in range(2):
        tp_rank(rank, 2)
        ours, theirs = loaders({"qload": {"load_mode": "mmap"}})
        got, want = load(ours, tiny_model), load(theirs, tiny_model)
        for (name, p), (_, q) in zip(got.named_parameters(), want.named_parameters()):
            assert torch.equal(p, q), f"rank {rank}: {name}"
        assert ours.qload_report["engine"] == "mmap"
        assert all(ours.qload_regions.get(n) for n in ours.qload_regions)


def test_uneven_and_empty_parts_of_a_padded_vocabulary(tmp_path, tp_rank):
    """A vocabulary of 130 is padded to 192 and cut in 48s at tp 4: rank 2 keeps 34 rows, rank 3
    none, and reads none."""
    from tiny_models import save_tiny

    path = save_tiny("llama", False, tmp_path / "vocab-130", vocab_size=130)
    stored = {t["name"]: t for t in qload.inspect(path)["tensors"]}
    parts = []
    for rank in range(4):
        tp_rank(rank, 4)
        ours, theirs = loaders({"qload": {"max_gap_bytes": 1024, "load_mode": "read"}})
        got, want = load(ours, path), load(theirs, path)
        for (name, p), (_, q) in zip(got.named_parameters(), want.named_parameters()):
            assert torch.equal(p, q), f"rank {rank}: {name}"
        parts.append(ours.qload_regions["model.embed_tokens.weight"])
        assert ours.qload_regions["lm_head.weight"] == parts[-1]
        assert_reads_only(ours.qload_regions, stored, read_bytes(ours))
    assert [end - begin for _, begin, end in parts] == [48, 48, 34, 0]


@pytest.mark.parametrize("tp", [1, 2])
def test_each_pipeline_stage_reads_only_its_layers(tiny_model, tp_rank, tp):
    stored = {t["name"]: t for t in qload.inspect(tiny_model)["tensors"]}
    for stage in range(2):
        for rank in range(tp):
            tp_rank(rank, tp)
            ours, theirs = loaders({"qload": {"max_gap_bytes": 1024, "load_mode": "read"}})
            got, want = load(ours, tiny_model, stage, 2), load(theirs, tiny_model, stage, 2)
            params = dict(want.named_parameters())
            assert set(dict(got.named_parameters())) == set(params)
            for name, p in got.named_parameters():
                assert torch.equal(p, params[name]), f"stage {stage} rank {rank}: {name}"
            other = f"model.layers.{1 - stage}."
            unread = {n for n, r in ours.qload_regions.items() if r is None}
            assert {n for n in stored if n.startswith(other)} <= unread, (stage, rank)
            assert not any(n.startswith(f"model.layers.{stage}.") for n in unread), (stage, rank)
            # What the stage keeps goes straight into its parameters; the rest is read by neither.
            assert set(ours.qload_into) == set(stored) - unread, (stage, rank)
            assert_read_once(ours, stored)
            assert_reads_only(ours.qload_regions, stored, read_bytes(ours))


def test_regions_off_reads_everything_and_gives_the_same_parameters(tiny_model, tp_rank):
    tp_rank(1, 2)
    ours, theirs = loaders({"qload_regions": False, "qload": {"max_gap_bytes": 1024, "load_mode": "read"}})
    got, want = load(ours, tiny_model), load(theirs, tiny_model)
    assert ours.qload_regions == {}
    assert ours.qload_report["read_bytes"] >= sum(t["nbytes"] for t in qload.inspect(tiny_model)["tensors"])
    for (name, p), (_, q) in zip(got.named_parameters(), want.named_parameters()):
        assert torch.equal(p, q), name


def test_into_off_streams_every_tensor_and_gives_the_same_parameters(tiny_model, tp_rank):
    stored = {t["name"]: t for t in qload.inspect(tiny_model)["tensors"]}
    tp_rank(1, 2)
    ours, theirs = loaders({"qload_into": False, "qload": {"max_gap_bytes": 1024, "load_mode": "read"}})
    got, want = load(ours, tiny_model), load(theirs, tiny_model)
    assert ours.qload_into == [] and ours.qload_into_report is None
    assert all(ours.qload_regions.get(n) for n in stored if any(p in n for p in PROJECTIONS))
    assert_read_once(ours, stored)  # all of it by the stream
    for (name, p), (_, q) in zip(got.named_parameters(), want.named_parameters()):
        assert torch.equal(p, q), name


def test_the_dry_run_leaves_the_model_untouched(tiny_model, tp_rank):
    from qload import _vllm_regions

    tp_rank(0, 2)
    model = vllm_llama.build_llama(tiny_model)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(3)
    stored = _vllm_regions.stored_tensors(qload.inspect(tiny_model))
    regions = _vllm_regions.predict(model, stored)
    assert regions["model.layers.0.self_attn.q_proj.weight"] == (0, 0, 128)
    assert regions["model.layers.0.self_attn.o_proj.weight"][0] == 1
    assert all(bool((p == 3).all()) for p in model.parameters())
    assert _vllm_regions.predict_destinations(model, stored)[0] == regions
    assert all(bool((p == 3).all()) for p in model.parameters())


def test_destinations_are_the_pieces_of_the_parameters_the_weight_loaders_copy_to(tiny_model, tp_rank):
    """q, k and v go to their rows of the fused qkv_proj, gate and up to theirs of gate_up_proj,
    o_proj and down_proj (columns cut) to the whole of theirs; the embedding to its rows."""
    from qload import _vllm_regions

    tp_rank(1, 2)
    model = vllm_llama.build_llama(tiny_model)
    _, destinations = _vllm_regions.predict_destinations(model, _vllm_regions.stored_tensors(qload.inspect(tiny_model)))
    qkv = model.model.layers[0].self_attn.qkv_proj.weight
    rows = qkv.stride(0) * qkv.element_size()
    expected = {"q_proj": (0, (0, 128, 256)), "k_proj": (128, (0, 64, 128)), "v_proj": (192, (0, 64, 128))}
    for proj, (row, region) in expected.items():
        target, got = destinations[f"model.layers.0.self_attn.{proj}.weight"]
        assert got == region and target.data_ptr() == qkv.data_ptr() + row * rows, proj
    gate_up = model.model.layers[1].mlp.gate_up_proj.weight
    target, region = destinations["model.layers.1.mlp.up_proj.weight"]
    assert region == (0, 256, 512) and target.data_ptr() == gate_up[256:].data_ptr() and target.shape == (256, 256)
    down = model.model.layers[1].mlp.down_proj.weight
    target, region = destinations["model.layers.1.mlp.down_proj.weight"]
    assert region == (1, 256, 512) and target.data_ptr() == down.data_ptr() and target.shape == down.shape
    target, region = destinations["model.embed_tokens.weight"]
    assert region == (0, 160, 320) and target.data_ptr() == model.model.embed_tokens.weight.data_ptr()


def test_by_default_a_warm_checkpoint_is_mapped(tiny_model, tp_rank):
    """load_mode auto (the plugin's default): files the page cache holds (just written here) are
    mapped, as vLLM's own loader maps them; the same parameters either way."""
    tp_rank(1, 2)
    ours, theirs = loaders()
    got, want = load(ours, tiny_model), load(theirs, tiny_model)
    assert ours.qload_settings["load_mode"] == "auto" and ours.qload_report["engine"] == "mmap"
    for (name, p), (_, q) in zip(got.named_parameters(), want.named_parameters()):
        assert torch.equal(p, q), name
    ours, _ = loaders({"qload": {"load_mode": "read"}})
    load(ours, tiny_model)
    assert ours.qload_report["engine"] != "mmap"

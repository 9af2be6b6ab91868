"""vLLM's llama layout (and Mixtral's, its MLPs mixtures of experts) built from vLLM's own
layers in one process, at an emulated tensor-parallel rank and pipeline stage, and loaded as
vLLM's load_model loads it: shared by the plugin's tensor-parallel tests and
bench/vllm_tp_bench.py."""
import types

import torch


def set_tp_rank(rank: int, size: int, setattr_=setattr) -> None:
    """Makes vLLM's layers see tensor-parallel rank `rank` of `size` (`setattr_`: pytest's
    monkeypatch.setattr, to undo it after a test)."""
    import vllm.distributed as dist
    import vllm.distributed.parallel_state as ps
    from vllm.model_executor import parameter
    from vllm.model_executor.layers import linear, vocab_parallel_embedding
    from vllm.model_executor.layers.fused_moe import config as moe_config, layer as moe_layer

    for module in (dist, ps, parameter, linear, vocab_parallel_embedding, moe_config, moe_layer):
        if hasattr(module, "get_tensor_model_parallel_rank"):
            setattr_(module, "get_tensor_model_parallel_rank", lambda: rank)
        if hasattr(module, "get_tensor_model_parallel_world_size"):
            setattr_(module, "get_tensor_model_parallel_world_size", lambda: size)


def build_llama(path: str, stage: int = 0, stages: int = 1, quant_config=None,
                expert_parallel: bool = False) -> torch.nn.Module:
    """vLLM's llama layout from vLLM's own layers, at the current tensor-parallel rank, holding
    pipeline stage `stage` of `stages` (the rest PPMissingLayer, as vLLM's make_layers does);
    `quant_config`: vLLM's quantization config for the projections (None: unquantized). A
    Mixtral checkpoint (num_local_experts in its config) gets vLLM's MixtralMoE for each MLP,
    its experts cut across the ranks (`expert_parallel`: whole experts spread over them)."""
    import json

    from vllm.model_executor.layers.layernorm import RMSNorm
    from vllm.model_executor.layers.linear import MergedColumnParallelLinear, QKVParallelLinear, RowParallelLinear
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
    from vllm.model_executor.models.llama import LlamaModel
    from vllm.model_executor.models.utils import AutoWeightsLoader, PPMissingLayer

    c = json.load(open(f"{path}/config.json"))
    hidden, inter = c["hidden_size"], c["intermediate_size"]
    heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
    head_dim = hidden // heads
    dtype = {"float16": torch.float16, "float32": torch.float32}.get(c.get("torch_dtype") or c.get("dtype"), torch.bfloat16)
    nn = torch.nn

    experts = c.get("num_local_experts")
    if experts:
        from vllm.model_executor.models.mixtral import MixtralModel, MixtralMoE

        _world_of_one()
        config = vllm_config(dtype, moe=True)
        config.parallel_config.enable_expert_parallel = expert_parallel
    else:
        config = vllm_config(dtype if quant_config else None)

    def layer(i):
        attn, mlp, block = nn.Module(), nn.Module(), nn.Module()
        q = dict(bias=False, params_dtype=dtype, quant_config=quant_config)
        at, ml = f"model.layers.{i}.self_attn", f"model.layers.{i}.mlp"
        attn.qkv_proj = QKVParallelLinear(hidden, head_dim, heads, kv, prefix=f"{at}.qkv_proj", **q)
        attn.o_proj = RowParallelLinear(heads * head_dim, hidden, prefix=f"{at}.o_proj", **q)
        block.self_attn = attn
        if experts:
            block.block_sparse_moe = MixtralMoE(experts, c["num_experts_per_tok"], hidden, inter, params_dtype=dtype,
                                                quant_config=quant_config, prefix=f"model.layers.{i}.block_sparse_moe")
        else:
            mlp.gate_up_proj = MergedColumnParallelLinear(hidden, [inter, inter], prefix=f"{ml}.gate_up_proj", **q)
            mlp.down_proj = RowParallelLinear(inter, hidden, prefix=f"{ml}.down_proj", **q)
            block.mlp = mlp
        block.input_layernorm = RMSNorm(hidden).to(dtype)
        block.post_attention_layernorm = RMSNorm(hidden).to(dtype)
        return block

    class Model(nn.Module):  # LlamaModel's layers and load_weights
        def __init__(self):
            super().__init__()
            first, last, layers = stage == 0, stage == stages - 1, c["num_hidden_layers"]
            held = range(stage * layers // stages, (stage + 1) * layers // stages)
            tied = c.get("tie_word_embeddings")
            self.embed_tokens = VocabParallelEmbedding(c["vocab_size"], hidden, params_dtype=dtype) \
                if first or (tied and last) else PPMissingLayer()
            self.layers = nn.ModuleList(layer(i) if i in held else PPMissingLayer() for i in range(layers))
            self.norm = RMSNorm(hidden).to(dtype) if last else PPMissingLayer()
            self.quant_config = quant_config  # AutoWeightsLoader maps quantized names by it

        def load_weights(self, weights):
            mapper = (MixtralModel if experts else LlamaModel).hf_to_vllm_mapper
            return AutoWeightsLoader(self).load_weights(weights, mapper=mapper)

    class CausalLM(nn.Module):  # LlamaForCausalLM's
        def __init__(self):
            super().__init__()
            self.model = Model()
            if stage < stages - 1:
                self.lm_head = PPMissingLayer()
            elif c.get("tie_word_embeddings"):
                self.lm_head = ParallelLMHead(c["vocab_size"], hidden, params_dtype=dtype).tie_weights(
                    self.model.embed_tokens)
            else:
                self.lm_head = ParallelLMHead(c["vocab_size"], hidden, params_dtype=dtype)

        def load_weights(self, weights):
            return AutoWeightsLoader(self).load_weights(weights)

    from vllm.config import set_current_vllm_config

    with set_current_vllm_config(config):
        return CausalLM()


def vllm_config(dtype=None, moe: bool = False):
    """The config vLLM's layers are built under: the cpu device (no GPU here); `dtype`: the
    model's, which quantized linear methods ask of the model config (a stand-in holding only it
    and whether the model is a mixture of experts: a real ModelConfig needs a model vLLM can
    build)."""
    from vllm.config import DeviceConfig, VllmConfig

    config = VllmConfig(device_config=DeviceConfig(device="cpu"))
    if dtype is not None:
        object.__setattr__(config, "model_config", types.SimpleNamespace(dtype=dtype, is_moe=moe))
    return config


def _world_of_one() -> None:
    """vLLM's MoE layers ask for its process groups: a world of this one process (gloo), made
    once; the tensor-parallel rank and size they see are still set_tp_rank's. Their kernel
    backend, which vLLM chooses by platform (none without a GPU), is answered "CPU": the
    weights are loaded, no forward pass runs."""
    import tempfile

    from vllm.config import set_current_vllm_config
    from vllm.distributed import parallel_state as ps
    from vllm.model_executor.layers.fused_moe import unquantized_fused_moe_method as method
    from vllm.model_executor.layers.fused_moe.oracle.unquantized import UnquantizedMoeBackend

    method.select_unquantized_moe_backend = lambda moe_config: (UnquantizedMoeBackend.CPU, None)
    if ps.model_parallel_is_initialized():
        return
    with set_current_vllm_config(vllm_config(torch.bfloat16, moe=True)):
        ps.init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                        distributed_init_method=f"file://{tempfile.mktemp()}")
        ps.initialize_model_parallel(1, 1)


def loaders(extra=None):
    """(--load-format qload with `extra` as its extra config, vLLM's default loader)."""
    import qload.vllm
    from vllm.config.load import LoadConfig
    from vllm.model_executor.model_loader import get_model_loader
    from vllm.model_executor.model_loader.default_loader import DefaultModelLoader

    qload.vllm.register()
    ours = get_model_loader(LoadConfig(load_format="qload", model_loader_extra_config=extra or {}))
    return ours, DefaultModelLoader(LoadConfig(load_format="safetensors"))


def load(loader, path: str, stage: int = 0, stages: int = 1, quant_config=None,
         expert_parallel: bool = False) -> torch.nn.Module:
    """The model loaded by `loader.load_weights`, as vLLM's load_model calls it (with its check
    that every parameter was loaded)."""
    from vllm.config import set_current_vllm_config

    model = build_llama(path, stage, stages, quant_config, expert_parallel)
    config = types.SimpleNamespace(model=path, revision=None, quantization=None, is_moe=False,
                                   multimodal_config=None)
    loader.counter_before_loading_weights = 0.0
    with torch.no_grad(), set_current_vllm_config(vllm_config()):
        loader.load_weights(model, config)
    return model


def read_bytes(loader) -> int:
    """The bytes a --load-format qload load read: the stream's, and load_into's (the tensors read
    straight into parameters)."""
    return loader.qload_report["read_bytes"] + (loader.qload_into_report or {}).get("read_bytes", 0)


def part_bytes(regions: dict, stored: dict, name: str) -> int:
    """The bytes of the part of a stored tensor (`stored`: qload.inspect's entries by name) a
    rank keeps: its region, the whole tensor when it has none, nothing when it is not used."""
    t = stored[name]
    if name not in regions:
        return t["nbytes"]
    if regions[name] is None:
        return 0
    (dim, begin, end), shape = regions[name], t["shape"]
    return t["nbytes"] // shape[dim] * (end - begin)


def assert_read_once(loader, stored: dict) -> None:
    """Each part a rank keeps is placed by one of the two loads: those in `loader.qload_into` by
    load_into, straight into the parameters, the others by the stream, which reads nothing of
    the former (placed_bytes: the bytes put where they go, without gaps or alignment)."""
    into = set(loader.qload_into)
    regions = loader.qload_regions
    streamed = sum(part_bytes(regions, stored, n) for n in stored if n not in into)
    assert loader.qload_report["placed_bytes"] == streamed, (loader.qload_report["placed_bytes"], streamed)
    report = loader.qload_into_report or {}
    placed, parts = report.get("placed_bytes", 0), sum(part_bytes(regions, stored, n) for n in into)
    assert report.get("tensors", 0) == len(into)
    if report.get("converted_tensors", 0) == 0:
        assert placed == parts, (placed, parts)
    else:  # F32 scales placed as BF16 (vLLM's parameter dtype): fewer bytes than stored
        assert placed < parts, (placed, parts)


def assert_reads_only(regions: dict, stored: dict, read: int) -> None:
    """`read` is what the regions take: whole rows; for columns at least the columns of every
    row, at most the span from the first row's first column to the last row's last (bytes between
    rows under max_gap_bytes are read through); nothing of a tensor not used. A read may start
    and end up to 4 KiB out, aligned for O_DIRECT."""
    least = most = 0
    for name, t in stored.items():
        whole = t["nbytes"]
        low = high = whole
        if name in regions:
            if regions[name] is None:
                continue
            (dim, begin, end), shape = regions[name], t["shape"]
            row = whole // shape[0]
            if end <= begin:
                low = high = 0
            elif dim == 0:
                low = high = row * (end - begin)
            else:
                low = shape[0] * (row // shape[1]) * (end - begin)
                high = whole - row + row // shape[1] * (end - begin)
        least, most = least + low, most + high
    assert least <= read <= most + 8192 * len(stored), (read, least, most)

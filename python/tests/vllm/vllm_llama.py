"""vLLM's llama layout built from vLLM's own layers in one process, at an emulated
tensor-parallel rank and pipeline stage, and loaded as vLLM's load_model loads it: shared by
the plugin's tensor-parallel tests and bench/vllm_tp_bench.py."""
import types

import torch


def set_tp_rank(rank: int, size: int, setattr_=setattr) -> None:
    """Makes vLLM's layers see tensor-parallel rank `rank` of `size` (`setattr_`: pytest's
    monkeypatch.setattr, to undo it after a test)."""
    import vllm.distributed as dist
    import vllm.distributed.parallel_state as ps
    from vllm.model_executor import parameter
    from vllm.model_executor.layers import linear, vocab_parallel_embedding

    for module in (dist, ps, parameter, linear, vocab_parallel_embedding):
        if hasattr(module, "get_tensor_model_parallel_rank"):
            setattr_(module, "get_tensor_model_parallel_rank", lambda: rank)
        if hasattr(module, "get_tensor_model_parallel_world_size"):
            setattr_(module, "get_tensor_model_parallel_world_size", lambda: size)


def build_llama(path: str, stage: int = 0, stages: int = 1) -> torch.nn.Module:
    """vLLM's llama layout from vLLM's own layers, at the current tensor-parallel rank, holding
    pipeline stage `stage` of `stages` (the rest PPMissingLayer, as vLLM's make_layers does)."""
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
    dtype = torch.bfloat16
    nn = torch.nn

    def layer():
        attn, mlp, block = nn.Module(), nn.Module(), nn.Module()
        attn.qkv_proj = QKVParallelLinear(hidden, head_dim, heads, kv, bias=False, params_dtype=dtype)
        attn.o_proj = RowParallelLinear(heads * head_dim, hidden, bias=False, params_dtype=dtype)
        mlp.gate_up_proj = MergedColumnParallelLinear(hidden, [inter, inter], bias=False, params_dtype=dtype)
        mlp.down_proj = RowParallelLinear(inter, hidden, bias=False, params_dtype=dtype)
        block.self_attn, block.mlp = attn, mlp
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
            self.layers = nn.ModuleList(layer() if i in held else PPMissingLayer() for i in range(layers))
            self.norm = RMSNorm(hidden).to(dtype) if last else PPMissingLayer()

        def load_weights(self, weights):
            return AutoWeightsLoader(self).load_weights(weights, mapper=LlamaModel.hf_to_vllm_mapper)

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

    with set_current_vllm_config(vllm_config()):  # what vLLM's own layer tests build them under
        return CausalLM()


def vllm_config():
    from vllm.config import DeviceConfig, VllmConfig

    return VllmConfig(device_config=DeviceConfig(device="cpu"))  # no GPU here: the cpu device


def load(loader, path: str, stage: int = 0, stages: int = 1) -> torch.nn.Module:
    """The model loaded by `loader.load_weights`, as vLLM's load_model calls it (with its check
    that every parameter was loaded)."""
    from vllm.config import set_current_vllm_config

    model = build_llama(path, stage, stages)
    config = types.SimpleNamespace(model=path, revision=None, quantization=None, is_moe=False,
                                   multimodal_config=None)
    loader.counter_before_loading_weights = 0.0
    with torch.no_grad(), set_current_vllm_config(vllm_config()):
        loader.load_weights(model, config)
    return model

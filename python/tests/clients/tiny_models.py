"""Tiny models built and saved by transformers, as users' checkpoints are (shared by the
clients and vllm suites)."""
import torch


def save_tiny(kind: str, tied: bool, path, vocab_size: int = 320, hidden_size: int = 256) -> str:
    """A random llama- or granite-shaped model in bf16, saved by save_pretrained (safetensors):
    4 heads, 2 kv heads, the intermediate size twice `hidden_size`."""
    import transformers

    torch.manual_seed(1234)
    shape = dict(hidden_size=hidden_size, intermediate_size=2 * hidden_size, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=vocab_size, tie_word_embeddings=tied)
    if kind == "llama":
        config, model_class = transformers.LlamaConfig(**shape), transformers.LlamaForCausalLM
    else:
        config, model_class = transformers.GraniteConfig(**shape), transformers.GraniteForCausalLM
    model = model_class(config).to(torch.bfloat16)
    model.save_pretrained(str(path), safe_serialization=True)
    return str(path)


MODELS = [("llama", False), ("llama", True), ("granite", False)]
MODEL_IDS = [f"{k}-{'tied' if t else 'untied'}" for k, t in MODELS]

"""GPTQ and AWQ checkpoints packed by vLLM's own quantization utilities (the packers and
reference dequantization vLLM's kernel tests check its GPTQ, AWQ and Marlin kernels against),
for the packer tests and the tensor-parallel tests.

vLLM quantizes a [K, N] (input-major) weight; `quantize_weights` / `gptq_quantize_weights`
return the reference `w_ref`, the integer values, scales and zero points, and `gptq_pack` /
`awq_pack` / `pack_cols` lay the integers out as GPTQ and AWQ checkpoints store them. What is
written here by hand is only the file layout around them (tensor names, the GPTQ v1 convention
of storing zero points minus one, config.json) and, for act-order, the row permutation (as
vLLM's own gptq_quantize_weights did before 0.10: quantize the permuted rows, store them back
in their original order with each row's group in g_idx).
"""
import json
import os

import safetensors.torch
import torch


def _utils():
    from vllm.model_executor.layers.quantization.utils import quant_utils
    from vllm.scalar_type import scalar_types

    return quant_utils, scalar_types


def _quantized_checkpoint(base_dir: str, out_dir, quantize, quantization_config: dict) -> dict:
    """Writes base_dir's model with every projection replaced by the parts `quantize(w)` gives
    for its [K, N] f16 weight (a dict of part name -> tensor, and vLLM's reference [K, N]);
    returns the references, [N, K] as the model holds them."""
    tensors = safetensors.torch.load_file(os.path.join(base_dir, "model.safetensors"))
    out, reference = {}, {}
    for name, t in tensors.items():
        if not name.endswith("proj.weight"):
            out[name] = t.to(torch.float16) if t.is_floating_point() else t
            continue
        parts, w_ref = quantize(t.t().contiguous().to(torch.float16))
        prefix = name[: -len(".weight")]
        out.update({f"{prefix}.{part}": value for part, value in parts.items()})
        reference[name] = w_ref.t().contiguous()
    os.makedirs(out_dir)
    safetensors.torch.save_file(out, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    config = json.load(open(os.path.join(base_dir, "config.json")))
    config["quantization_config"] = quantization_config
    config["torch_dtype"] = "float16"
    json.dump(config, open(os.path.join(out_dir, "config.json"), "w"))
    return reference


def gptq_checkpoint(base_dir: str, out_dir, bits: int, group: int, act_order: bool) -> dict:
    """GPTQ v1 (symmetric, uint<bits>b<2^(bits-1)>) as GPTQModel / AutoGPTQ write it."""
    qu, st = _utils()
    quant_type = {4: st.uint4b8, 8: st.uint8b128}[bits]
    torch.manual_seed(7)

    def quantize(w):
        k, n = w.shape
        perm = torch.randperm(k) if act_order else torch.arange(k)
        w_ref_p, w_q_p, w_s = qu.gptq_quantize_weights(w[perm], quant_type, group)
        w_ref, w_q = torch.empty_like(w_ref_p), torch.empty_like(w_q_p)
        w_ref[perm], w_q[perm] = w_ref_p, w_q_p
        g_idx = torch.empty(k, dtype=torch.int32)
        g_idx[perm] = (torch.arange(k) // group).to(torch.int32)
        # Symmetric: every zero point is the type's bias; GPTQ v1 stores it minus one.
        zeros = torch.full((k // group, n), quant_type.bias - 1, dtype=torch.int32)
        return {"qweight": qu.gptq_pack(w_q, bits, k, n), "scales": w_s.to(torch.float16).contiguous(),
                "qzeros": qu.pack_cols(zeros, bits, k // group, n), "g_idx": g_idx}, w_ref

    return _quantized_checkpoint(base_dir, out_dir, quantize, {
        "quant_method": "gptq", "bits": bits, "group_size": group, "desc_act": act_order, "sym": True,
        "checkpoint_format": "gptq"})


def awq_checkpoint(base_dir: str, out_dir, group: int) -> dict:
    """AWQ GEMM (uint4 with zero points) as AutoAWQ writes it."""
    qu, st = _utils()

    def quantize(w):
        k, n = w.shape
        w_ref, w_q, w_s, w_zp = qu.quantize_weights(w, st.uint4, group, zero_points=True)
        return {"qweight": qu.awq_pack(w_q, 4, k, n), "qzeros": qu.awq_pack(w_zp, 4, k // group, n),
                "scales": w_s.to(torch.float16).contiguous()}, w_ref

    return _quantized_checkpoint(base_dir, out_dir, quantize, {
        "quant_method": "awq", "bits": 4, "group_size": group, "zero_point": True, "version": "gemm"})

// Synthetic llama-shaped checkpoints for tests, demos and benchmarks: config.json, sharded
// safetensors files and (for more than one shard) a model.safetensors.index.json, exactly
// like a Hugging Face export. Deterministic: the same options give the same bytes, because
// every element is a function of (seed, tensor index, element index), not of a stream.
//
// With `quant` set, the linear weights (self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj) are
// written as the stored parts of a quantized checkpoint, with the matching
// config.json quantization_config, so tests and benchmarks read real quantized files
// (../shared/formats.md sections 1-4). Embeddings, norms and lm_head keep `dtype`.
//   gptq4 / gptq3 / gptq8  GPTQ v1 (checkpoint_format "gptq": zeros stored minus 1), symmetric,
//                          group 128, desc_act false: qweight, qzeros, scales (F16), g_idx (k / 128).
//                          Random codes, z = 2^(b-1), scales in [1e-3, 1e-2].
//   awq                    AutoAWQ GEMM, 4-bit, group 128, random zeros in [0, 16): qweight,
//                          qzeros, scales (F16).
//   fp8-block / fp8-channel / fp8-tensor
//                          the unquantized weight (the bytes synth writes without `quant`, same
//                          seed) quantized to F8_E4M3 with a 128x128 block (weight_scale_inv),
//                          per-row or per-tensor F32 scale; configs exactly as `qload convert
//                          --quantize` writes them (fp8 / fbgemm_fp8 / fp8).
//   ct-pack4               compressed-tensors pack-quantized, 4-bit, group 128, symmetric:
//                          weight_packed, weight_scale [N, groups], weight_shape (I64).
//   ct-pack4-asym          the same, asymmetric: random zero points in weight_zero_point,
//                          packed along N.
//   ct-fp8                 compressed-tensors float-quantized, channel strategy: weight F8_E4M3
//                          and weight_scale [N, 1], the per-row scale rounded to `dtype`.
// The integer schemes need every linear K (hidden and intermediate) to be a multiple of the
// group size 128 (no partial groups: the kernels that read these files need whole groups), and
// awq every N (hidden, intermediate, kv_heads * head_dim) to be a multiple of 8. The compressed-
// tensors scales, like the producer's, are stored in `dtype`.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "qload/runtime/dtype.hpp"
#include "qload/runtime/error.hpp"

namespace qload::session {

struct SynthOptions {
  std::uint32_t layers = 2;
  std::uint32_t hidden = 256;
  std::uint32_t intermediate = 688;
  std::uint32_t vocab = 1024;
  std::uint32_t heads = 4;
  std::uint32_t kv_heads = 2;
  std::uint32_t shards = 2;
  DType dtype = DType::kBF16;  // kBF16, kF16 or kF32
  std::uint64_t seed = 0;
  std::string quant;  // empty: no quantization; else one of kSynthQuantNames
};

// The values SynthOptions::quant accepts.
inline constexpr std::array<std::string_view, 11> kSynthQuantNames = {
    "gptq4",      "gptq3",    "gptq8",         "awq",    "fp8-block", "fp8-channel",
    "fp8-tensor", "ct-pack4", "ct-pack4-asym", "ct-fp8", "ct-nvfp4"};

struct SynthReport {
  std::uint64_t tensors = 0;  // stored tensors (a quantized weight counts each of its parts)
  std::uint64_t bytes = 0;    // tensor bytes over all shards
  std::uint32_t files = 0;
};

// Checks the options (hidden divisible by heads, heads by kv_heads, a float dtype, a known
// quant name and the geometry it needs, ...): kInvalidArgument naming what is wrong.
Status validate(const SynthOptions& options);

// Writes the checkpoint into directory `out` (created if missing; existing files of the
// same names are replaced atomically).
Result<SynthReport> synthesize(const std::string& out, const SynthOptions& options);

}  // namespace qload::session

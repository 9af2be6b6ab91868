// Quantized checkpoints: which scheme a checkpoint uses, and which stored tensors make up each
// quantized weight (a "logical tensor"), checked against each other before any data is read.
//
// detect_quantization() reads the scheme from config.json's quantization_config, else from
// quantize_config.json (AutoGPTQ), quant_config.json (AutoAWQ) or hf_quant_config.json
// (ModelOpt) in the model directory, and cross-checks it with the tensor-name suffixes. Every
// part's dtype and shape is checked against bits, group size, K and N; a mismatch is
// kCorrupt naming the tensor, the expected and the found shape. docs/formats.md lists what is
// supported and every decision taken where producers disagree. Byte-level facts:
// ../shared/formats.md (sources cited there).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qload/formats/catalog.hpp"
#include "qload/runtime/dtype.hpp"
#include "qload/runtime/error.hpp"

namespace qload::formats {

enum class QuantScheme : std::uint8_t {
  // GPTQ v1/v2 (AutoGPTQ, GPTQModel): qweight I32 [K*b/32, N] packed along K (LSB-first
  // bitstream), qzeros I32 [groups, ceil(N*b/32)] packed along N, scales F16/BF16/F32
  // [groups, N], optional g_idx I32 [K]. W[n,k] = scales[g,n] * (q[k,n] - z[g,n]), g = g_idx[k]
  // (or k / group). v1 stores z - 1 (decoded per field: (stored + 1) & (2^b - 1)).
  kGptq,
  // AWQ GEMM: qweight I32 [K, N/8] packed along N in the order [0,2,4,6,1,3,5,7]; qzeros I32
  // [K/G, N/8] same order; scales [K/G, N]. W[n,k] = (q - z) * s with g = k / G.
  kAwqGemm,
  // AWQ GEMV: qweight I32 [N, K/8] packed along K in natural order; qzeros I32 [N, Wz];
  // scales [N, 8*Wz] (Wz = ceil(groups / 8) rounded up to 1/2/4 for G >= 128 / 64 / 32).
  kAwqGemv,
  // FP8: weight F8_E4M3 or F8_E5M2 [N, K] times a scale: per tensor (weight_scale [] or [1]),
  // per row (weight_scale [N, 1] or [N]), or per block (weight_scale_inv or weight_scale
  // [ceil(N/bn), ceil(K/bk)], DeepSeek-V3 and compressed-tensors float-quantized). Llama-4's
  // fbgemm experts: weight `<p>_proj` [E, K, N] (stored transposed) with weight_scale
  // `<p>_proj_scale` [E, 1, N] or [E, N, 1] (ScaleLayout::kColumn), decoded as stored.
  kFp8,
  // compressed-tensors pack-quantized: weight_packed I32 [N, ceil(K*b/32)] (offset binary,
  // LSB-first), weight_scale [N, groups], weight_zero_point I32 [ceil(N*b/32), groups]
  // (packed along N, asym only), weight_shape [2] = (N, K), weight_g_idx I32 [K] (optional).
  kCtPacked,
  // compressed-tensors int-quantized / naive-quantized: weight I8 [N, K], weight_scale
  // [N, groups] / [N, 1] / [1], weight_zero_point (asym, same shape), weight_g_idx optional.
  kCtInt,
  // GGML blocks (GGUF's quantized tensor types): blocks U8 [..., K / block_elems * block_bytes],
  // each row of K elements a run of self-contained blocks (scales inside); the type is
  // QuantParams::ggml_type. Formulas per type: formats/src/quant/ggml_element.hpp.
  kGgml,
  // OCP MXFP4 (gpt-oss): blocks U8 [..., K/32, 16] of E2M1 pairs (element 2j in the low nibble
  // of byte j), scales U8 [..., K/32] of E8M0 exponents; W = e2m1 * 2^(scale - 127).
  kMxfp4,
  // compressed-tensors nvfp4-pack-quantized: weight_packed U8 [N, K/2] of E2M1 pairs (element
  // 2j in the low nibble of byte j), weight_scale F8_E4M3 [N, K/16], weight_global_scale F32
  // [1]; W = e2m1 * (scale / global_scale), as compressed-tensors' decompressor computes it.
  // ModelOpt's NVFP4 stores the same codes and scales as weight and weight_scale with
  // weight_scale_2 F32 [] (= 1 / global scale): W = e2m1 * (scale * weight_scale_2), as
  // ModelOpt's NVFP4QTensor.dequantize computes it.
  kNvfp4,
  // bitsandbytes 4-bit (NF4 / FP4) as transformers serialises it: weight U8 [N*K/2, 1] (element
  // i of the flattened [N, K] in the high nibble of byte i/2 when i is even), absmax F32
  // [blocks] or, double-quantized, U8 [blocks] codes into nested_quant_map F32 [256] times
  // nested_absmax F32 [per 256 blocks] plus nested_offset; quant_map F32 [16];
  // W[i] = quant_map[code] * absmax[i / blocksize]. Shape and block sizes come from the
  // quant_state JSON tensor (Catalog::embedded).
  kBnb4,
  // bitsandbytes 8-bit (LLM.int8) as transformers saves it: `<p>.weight` I8 [N, K], `<p>.SCB`
  // F32 [N] (each row's absmax), `<p>.weight_format` U8 scalar (0: row-major);
  // W = (q * SCB[n]) * f32(1/127), as bitsandbytes' int8_vectorwise_dequant.
  kBnb8,
};
std::string_view quant_scheme_name(QuantScheme scheme) noexcept;

// GPTQModel's v1 offset: a 1 in every b-bit field of a 32-bit word (0x55555555, 0x11111111,
// 0x01010101 for 2, 4, 8 bits); 0 for 3 bits, whose fields cross words.
constexpr std::uint32_t gptq_v1_word_offset(unsigned bits) noexcept {
  return bits == 2 ? 0x55555555u : bits == 4 ? 0x11111111u : bits == 8 ? 0x01010101u : 0u;
}

// How FP8 and compressed-tensors scales broadcast over the [N, K] weight. kColumn: one scale
// per column of the stored matrix, for weights stored transposed (Llama-4's fbgemm FP8 experts
// [E, K, N], scaled per output channel N; `rows` and `cols` are then the stored K and N).
enum class ScaleLayout : std::uint8_t { kTensor, kRow, kGroup, kBlock, kColumn };

struct QuantParams {
  QuantScheme scheme = QuantScheme::kGptq;
  std::uint32_t bits = 4;        // 2, 3, 4, 8 (GPTQ, compressed-tensors), 4 (AWQ), 8 (FP8, int8)
  std::uint64_t group_size = 0;  // columns of K per group (a config's -1 is stored as K)
  // The stored group count, when it is not ceil(K / group_size): a row-parallel shard whose
  // g_idx indexes the whole weight's groups (its scales and zero points are kept whole, as
  // vLLM does for act-order). 0: ceil(K / group_size). Needs a g_idx part.
  std::uint64_t groups = 0;
  bool sym = true;                 // symmetric: no stored zero points (compressed-tensors), or z = 2^(b-1) (GPTQ)
  std::uint32_t gptq_version = 2;  // 1: stored zeros are z - 1 (checkpoint_format "gptq" or missing)
  // GPTQ v1: how z - 1 was stored, and so is read back. Per field (AutoGPTQ, exllama, vLLM:
  // z = (stored + 1) & (2^b - 1)), or by whole words (GPTQModel: the v2 words minus
  // gptq_v1_word_offset(b), borrows crossing fields; read back by adding it mod 2^32). 3-bit
  // zeros are per field either way.
  bool gptq_v1_whole_word = false;
  ScaleLayout scale_layout = ScaleLayout::kGroup;
  std::uint32_t block_rows = 0;      // kBlock: bn
  std::uint32_t block_cols = 0;      // kBlock: bk
  DType weight_dtype = DType::kI32;  // F8_E4M3 / F8_E5M2 (FP8), I8 (kCtInt), I32 (packed)
  DType scale_dtype = DType::kF16;
  // compressed-tensors packing of widths other than 1/2/4/8: a dense bitstream (true, newer
  // writers) or 32/b values per word with the high bits unused (false, before mid 2026).
  bool dense_bitstream = true;
  std::uint32_t ggml_type = 0;  // kGgml: ggml's type id (12 = Q4_K)
  // kBnb4 (group_size is the block size): "nf4" or "fp4" codes; double quantization's block
  // size (0: absmax stored as F32) and the offset added to the decoded absmax.
  bool bnb_fp4 = false;
  std::uint64_t nested_block = 0;
  float nested_offset = 0.0f;
};

// A weight's scheme as users name it: quant_scheme_name, and for GGML the block type too
// ("ggml-Q4_K").
struct QuantParams;
std::string weight_scheme_name(const QuantParams& params);

// One quantized weight and the stored tensors (parts) it is made of.
struct LogicalTensor {
  std::string name;  // the dequantized weight's name: "<prefix>.weight"
  QuantParams params;
  std::uint64_t rows = 0;  // N, out features
  std::uint64_t cols = 0;  // K, in features
  // The dequantized weight's shape when it is not [rows, cols] (GGML: [K] or [E, N, K], rows
  // being the product of the outer dims); empty: [rows, cols].
  Shape shape;
  // Stacked MoE experts, shape [E, N, K] (rows = E * N): every part carries E as its leading
  // dim, and expert e's slice of each part is a complete 2-D weight of N x K (expert_view in
  // quant_codec.hpp). 0: not stacked.
  std::uint64_t experts = 0;
  // role -> index into Catalog::tensors. Roles: qweight, qzeros, scales, g_idx (GPTQ/AWQ);
  // weight, weight_scale, weight_scale_inv, input_scale (FP8); weight_packed, weight_scale,
  // weight_zero_point, weight_shape, weight_g_idx (compressed-tensors); weight (kCtInt); blocks (kGgml);
  // blocks, scales (kMxfp4 as gpt-oss) or weight_packed, weight_scale (kMxfp4 as
  // compressed-tensors); weight_packed, weight_scale, weight_global_scale (kNvfp4), or weight,
  // weight_scale, weight_scale_2 (kNvfp4 as ModelOpt); weight,
  // absmax, quant_map, nested_absmax, nested_quant_map, quant_state (kBnb4); weight, SCB,
  // weight_format (kBnb8).
  std::vector<std::pair<std::string, std::uint32_t>> parts;

  std::optional<std::uint32_t> part(std::string_view role) const;
  Shape dequantized_shape() const { return shape.rank() > 0 ? shape : Shape{rows, cols}; }
};

// How a quantized weight's scales and zero points are laid out, in words (`qload inspect`):
// scales "per-tensor", "per-channel", "per-group 128", "per-group 128 (with g_idx)" or
// "block 128x128", with their dtype; zero points "none (symmetric)", or where they are and how
// they are stored ("per-group, 4-bit packed along N in I32, stored as z-1 (GPTQ v1)").
struct QuantLayoutText {
  std::string scales;       // layout
  std::string scale_dtype;  // of the stored scales ("F16")
  std::string zero_points;
};
QuantLayoutText describe_layout(const LogicalTensor& weight, const Catalog& catalog);

struct QuantizedCatalog {
  std::string method;  // "gptq", "awq", "fp8", "fbgemm_fp8", "modelopt", "compressed-tensors", "gguf"; empty: none
  std::string config_source;           // the file the scheme came from ("config.json", "quantize_config.json", ...)
  std::vector<LogicalTensor> logical;  // sorted by name
  // Catalog tensors that belong to no logical tensor (embeddings, norms, biases, ignored
  // modules): loaded as they are.
  std::vector<std::uint32_t> plain;
};

// Detects the scheme and groups the parts. A checkpoint with no quantization config and no
// quantized parts gives method "" and every tensor plain. Errors (kCorrupt unless noted):
// a part whose dtype or shape contradicts the config (names tensor, expected and found), a
// missing required part, a contradictory config (e.g. config.json says gptq, the tensors are
// AWQ), kUnsupported for a scheme or option qload does not decode (named).
Result<QuantizedCatalog> detect_quantization(const Catalog& catalog);

}  // namespace qload::formats

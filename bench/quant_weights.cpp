// The weights qload_quant_bench decodes (quant_weights.hpp).
#include "quant_weights.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "best_seconds.hpp"
#include "qload/formats/convert.hpp"
#include "qload/formats/convert_cuda.hpp"
#include "qload/formats/quant.hpp"
#include "qload/formats/quant_codec.hpp"
#include "qload/formats/quant_cuda.hpp"
#include "qload/formats/quant_pack.hpp"
#include "qload/runtime/cuda_memory.hpp"
#include "qload/runtime/dtype.hpp"
#include "qload/runtime/error.hpp"
#include "qload/runtime/host_buffer.hpp"
#include "qload/runtime/shape.hpp"
#include "quant/device_args.hpp"   // --isa avx2: MXFP4's and NVFP4's arguments
#include "quant/row_decoders.hpp"  // --isa: one instruction set's GGML, MXFP4 and NVFP4 decoders

namespace qload::bench::quant {
namespace {

namespace fq = qload::formats;
namespace fqd = qload::formats::detail;

// ---- random weights ------------------------------------------------------------------------

std::uint64_t splitmix(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// `count` random codes in [0, 2^bits).
std::vector<std::uint8_t> random_codes(std::uint64_t count, unsigned bits, std::uint64_t seed) {
  std::vector<std::uint8_t> out(count);
  const auto mask = static_cast<std::uint8_t>((1u << bits) - 1);
  for (std::uint64_t i = 0; i < count; i += 8) {
    const std::uint64_t r = splitmix(seed);
    for (std::uint64_t j = 0; j < 8 && i + j < count; ++j) out[i + j] = static_cast<std::uint8_t>(r >> (8 * j)) & mask;
  }
  return out;
}

// `count` scales in [1e-3, 1e-2] as F16, BF16 or F32 elements.
Bytes random_scales(std::uint64_t count, DType dtype, std::uint64_t seed) {
  const std::size_t size = dtype == DType::kF32 ? 4 : 2;
  Bytes out(count * size);
  for (std::uint64_t i = 0; i < count; ++i) {
    const float v = 1e-3f + 9e-3f * static_cast<float>(splitmix(seed) >> 40) * 0x1p-24f;
    std::uint32_t bits;
    std::memcpy(&bits, &v, 4);
    if (dtype == DType::kF32) {
      std::memcpy(out.data() + i * 4, &bits, 4);
    } else {
      const std::uint16_t h = dtype == DType::kF16 ? fq::f32_to_f16_bits(bits) : fq::f32_to_bf16_bits(bits);
      std::memcpy(out.data() + i * 2, &h, 2);
    }
  }
  return out;
}

}  // namespace

// An unquantized bf16 [n, k] weight, roughly normal with sigma 0.02 (sum of 4 uniforms), the
// input of the FP8 / int8 schemes and of the quantize measurements.
Bytes random_bf16(std::uint64_t n, std::uint64_t k, std::uint64_t seed) {
  Bytes out(n * k * 2);
  for (std::uint64_t i = 0; i < n * k; ++i) {
    const std::uint64_t r = splitmix(seed);
    float u = 0.0f;
    for (int j = 0; j < 4; ++j) u += static_cast<float>((r >> (16 * j)) & 0xFFFF) * 0x1p-16f - 0.5f;
    const float v = u * 0.0346f;  // sqrt(3) * 0.02: four uniforms of variance 1/12 each
    std::uint32_t bits;
    std::memcpy(&bits, &v, 4);
    const std::uint16_t h = fq::f32_to_bf16_bits(bits);
    std::memcpy(out.data() + i * 2, &h, 2);
  }
  return out;
}

namespace {

// ---- weights in every scheme ---------------------------------------------------------------

Weight int_weight(std::string name, fq::QuantScheme scheme, std::uint32_t bits, std::uint64_t n, std::uint64_t k) {
  Weight w{.name = std::move(name), .t = {}, .parts = {}};
  w.t.name = "model.layers.0.self_attn.o_proj.weight";
  w.t.rows = n;
  w.t.cols = k;
  w.t.params = {.scheme = scheme, .bits = bits, .group_size = kGroupSize, .weight_dtype = DType::kI32};
  return w;
}

// GPTQ v1 (checkpoint_format "gptq", what most published checkpoints are), symmetric, F16
// scales; g_idx: none, the trivial k / G that GPTQ writers store anyway, or act-order.
enum class GIdx : std::uint8_t { kNone, kTrivial, kActOrder };

Result<Weight> make_gptq(std::string name, std::uint32_t bits, GIdx g_idx, std::uint64_t n, std::uint64_t k) {
  Weight w = int_weight(std::move(name), fq::QuantScheme::kGptq, bits, n, k);
  w.t.params.sym = true;
  w.t.params.gptq_version = 1;
  w.t.params.scale_dtype = DType::kF16;
  QLOAD_ASSIGN_OR_RETURN(const fq::PackedShapes s, fq::packed_shapes(w.t));
  const std::vector<std::uint8_t> q = random_codes(k * n, bits, 11 + bits);
  const std::vector<std::uint8_t> zeros(s.groups * n, static_cast<std::uint8_t>(1u << (bits - 1)));
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t qw_bytes, s.weight.nbytes(DType::kI32));
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t qz_bytes, s.zeros.nbytes(DType::kI32));
  Bytes qweight(qw_bytes);
  Bytes qzeros(qz_bytes);
  QLOAD_TRY(fq::pack_gptq(w.t, q, zeros, qweight, qzeros));
  w.add("qweight", DType::kI32, s.weight, std::move(qweight));
  w.add("qzeros", DType::kI32, s.zeros, std::move(qzeros));
  w.add("scales", DType::kF16, s.scales, random_scales(s.groups * n, DType::kF16, 12));
  if (g_idx == GIdx::kNone) return w;
  // Act-order: columns quantized in a random order, consecutive runs of G in it form a group.
  std::vector<std::int32_t> perm(k);
  std::iota(perm.begin(), perm.end(), 0);
  if (g_idx == GIdx::kActOrder) std::shuffle(perm.begin(), perm.end(), std::mt19937_64(13));
  Bytes idx(k * 4);
  for (std::uint64_t i = 0; i < k; ++i) {
    const auto g = static_cast<std::int32_t>(i / kGroupSize);
    std::memcpy(idx.data() + static_cast<std::uint64_t>(perm[i]) * 4, &g, 4);
  }
  w.add("g_idx", DType::kI32, Shape{k}, std::move(idx));
  return w;
}

// AWQ 4-bit g128 with random zero points, F16 scales; GEMM or GEMV layout.
Result<Weight> make_awq(std::string name, bool gemv, std::uint64_t n, std::uint64_t k) {
  Weight w = int_weight(std::move(name), gemv ? fq::QuantScheme::kAwqGemv : fq::QuantScheme::kAwqGemm, 4, n, k);
  w.t.params.sym = false;
  w.t.params.scale_dtype = DType::kF16;
  QLOAD_ASSIGN_OR_RETURN(const fq::PackedShapes s, fq::packed_shapes(w.t));
  const std::vector<std::uint8_t> q = random_codes(k * n, 4, 21);
  const std::uint64_t groups = (k + kGroupSize - 1) / kGroupSize;
  const std::vector<std::uint8_t> zeros = random_codes(groups * n, 4, 22);
  Bytes scales = random_scales(groups * n, DType::kF16, 23);
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t qw_bytes, s.weight.nbytes(DType::kI32));
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t qz_bytes, s.zeros.nbytes(DType::kI32));
  Bytes qweight(qw_bytes);
  Bytes qzeros(qz_bytes);
  if (gemv) {
    QLOAD_ASSIGN_OR_RETURN(const std::uint64_t s_bytes, s.scales.nbytes(DType::kF16));
    Bytes scales_out(s_bytes);
    QLOAD_TRY(fq::pack_awq_gemv(w.t, q, zeros, scales, qweight, qzeros, scales_out));
    scales = std::move(scales_out);
  } else {
    QLOAD_TRY(fq::pack_awq_gemm(w.t, q, zeros, qweight, qzeros));
  }
  w.add("qweight", DType::kI32, s.weight, std::move(qweight));
  w.add("qzeros", DType::kI32, s.zeros, std::move(qzeros));
  w.add("scales", DType::kF16, s.scales, std::move(scales));
  return w;
}

// compressed-tensors pack-quantized 4-bit g128, symmetric, BF16 scales, with weight_shape.
Result<Weight> make_ct_pack4(std::string name, std::uint64_t n, std::uint64_t k) {
  Weight w = int_weight(std::move(name), fq::QuantScheme::kCtPacked, 4, n, k);
  w.t.params.sym = true;
  w.t.params.scale_dtype = DType::kBF16;
  QLOAD_ASSIGN_OR_RETURN(const fq::PackedShapes s, fq::packed_shapes(w.t));
  const std::vector<std::uint8_t> codes = random_codes(n * k, 4, 31);
  std::vector<std::int8_t> q(codes.size());
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<std::int8_t>(codes[i] - 8);
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t packed_bytes, s.weight.nbytes(DType::kI32));
  Bytes packed(packed_bytes);
  QLOAD_TRY(fq::pack_ct(w.t, q, {}, packed, {}));
  Bytes shape(16);
  const std::array<std::int64_t, 2> dims = {static_cast<std::int64_t>(n), static_cast<std::int64_t>(k)};
  std::memcpy(shape.data(), dims.data(), 16);
  w.add("weight_packed", DType::kI32, s.weight, std::move(packed));
  w.add("weight_scale", DType::kBF16, s.scales, random_scales(s.groups * n, DType::kBF16, 32));
  w.add("weight_shape", DType::kI64, Shape{2}, std::move(shape));
  return w;
}

// FP4: OCP MXFP4 as gpt-oss ships it (E8M0 per 32) or compressed-tensors NVFP4 (E4M3 per 16
// over an F32 global scale): random codes, scales in a finite range.
Result<Weight> make_fp4(std::string name, bool nv, std::uint64_t n, std::uint64_t k) {
  Weight w{.name = std::move(name), .t = {}, .parts = {}};
  w.t.name = "model.layers.0.mlp.experts.down_proj";
  w.t.rows = n;
  w.t.cols = k;
  w.t.params = {
      .scheme = nv ? fq::QuantScheme::kNvfp4 : fq::QuantScheme::kMxfp4, .bits = 4, .group_size = nv ? 16u : 32u};
  const std::vector<std::uint8_t> codes = random_codes(n * k, 8, 51);  // two E2M1 codes a byte
  Bytes packed(n * k / 2);
  std::memcpy(packed.data(), codes.data(), packed.size());
  const std::uint64_t groups = k / w.t.params.group_size;
  const std::vector<std::uint8_t> s = random_codes(n * groups, 8, 52);
  Bytes scales(n * groups);
  for (std::size_t i = 0; i < scales.size(); ++i)  // E4M3 exponents 1..8, or E8M0 around 2^-8
    scales[i] = static_cast<std::byte>(nv ? (((1u + (s[i] & 7u)) << 3) | (s[i] >> 5)) : 112u + (s[i] & 15u));
  if (nv) {
    w.add("weight_packed", DType::kU8, Shape{n, k / 2}, std::move(packed));
    w.add("weight_scale", DType::kF8_E4M3, Shape{n, groups}, std::move(scales));
    Bytes global(4);
    const float g = 1000.0f;
    std::memcpy(global.data(), &g, 4);
    w.add("weight_global_scale", DType::kF32, Shape{1}, std::move(global));
  } else {
    w.add("blocks", DType::kU8, Shape{n, groups, 16}, std::move(packed));
    w.add("scales", DType::kU8, Shape{n, groups}, std::move(scales));
  }
  return w;
}

// A GGUF block type (kGgml): random block bytes, each block's f16 / E8M0 scales overwritten
// with finite values around 2^-4 so that every element is a number. `scales`: the byte offsets
// of the block's f16 scales (MXFP4: its one E8M0 byte, at 0).
Weight make_ggml(std::string name, std::uint32_t type, std::uint32_t block_elems, std::uint32_t block_bytes,
                 std::vector<std::uint32_t> scales, std::uint64_t n, std::uint64_t k) {
  Weight w{.name = std::move(name), .t = {}, .parts = {}};
  w.t.name = "blk.0.attn_output.weight";
  w.t.rows = n;
  w.t.cols = k;
  w.t.params = {.scheme = fq::QuantScheme::kGgml, .bits = 4, .weight_dtype = DType::kU8, .ggml_type = type};
  const std::uint64_t row_bytes = k / block_elems * block_bytes;
  const std::vector<std::uint8_t> codes = random_codes(n * row_bytes, 8, 53);
  Bytes blocks(codes.size());
  std::memcpy(blocks.data(), codes.data(), blocks.size());
  const bool mxfp4 = type == 39;
  for (std::uint64_t b = 0; b < blocks.size(); b += block_bytes)
    for (const std::uint32_t at : scales) {
      if (mxfp4) {
        blocks[b] = static_cast<std::byte>(120u + (codes[b] & 7u));  // 2^(-7..0)
        continue;
      }
      const std::uint16_t half = 0x2C00u | (codes[b + at] & 0x3FFu);  // 2^-4 .. 2^-3
      blocks[b + at] = static_cast<std::byte>(half & 0xFF);
      blocks[b + at + 1] = static_cast<std::byte>(half >> 8);
    }
  w.add("blocks", DType::kU8, Shape{n, row_bytes}, std::move(blocks));
  return w;
}

// FP8 E4M3 (per tensor, per row, 128x128 block) or compressed-tensors int8 per row: the bf16
// weight quantized by formats::quantize, F32 scales.
Result<Weight> make_quantized(std::string name, fq::QuantizeTarget target, const Bytes& bf16, std::uint64_t n,
                              std::uint64_t k) {
  QLOAD_ASSIGN_OR_RETURN(const fq::QuantizedLayout layout, fq::quantized_layout(n, k, target));
  Weight w{.name = std::move(name), .t = {}, .parts = {}};
  w.t.name = "model.layers.0.self_attn.o_proj.weight";
  w.t.rows = n;
  w.t.cols = k;
  const bool int8 = target == fq::QuantizeTarget::kInt8Row;
  w.t.params = {.scheme = int8 ? fq::QuantScheme::kCtInt : fq::QuantScheme::kFp8,
                .bits = 8,
                .group_size = 0,
                .sym = true,
                .weight_dtype = layout.weight_dtype,
                .scale_dtype = DType::kF32};
  switch (target) {
    case fq::QuantizeTarget::kFp8Tensor: w.t.params.scale_layout = fq::ScaleLayout::kTensor; break;
    case fq::QuantizeTarget::kFp8Block:
      w.t.params.scale_layout = fq::ScaleLayout::kBlock;
      w.t.params.block_rows = 128;
      w.t.params.block_cols = 128;
      break;
    default: w.t.params.scale_layout = fq::ScaleLayout::kRow; break;
  }
  Bytes weight(layout.weight_bytes);
  Bytes scale(layout.scale_bytes);
  QLOAD_TRY(fq::quantize(bf16, DType::kBF16, n, k, target, weight, scale));
  w.add("weight", layout.weight_dtype, Shape{n, k}, std::move(weight));
  w.add(layout.scale_suffix, DType::kF32, layout.scale_shape, std::move(scale));
  return w;
}

}  // namespace

// Every scheme's weight whose name contains `only`, in the order the tables print them; the
// others are not built (at [16384, 16384] building all of them takes minutes).
Result<std::vector<Weight>> make_weights(std::uint64_t n, std::uint64_t k, std::string_view only) {
  std::vector<Weight> out;
  Bytes bf16;  // the FP8 and int8 weights' source, made once if one of them is wanted
  const auto source = [&]() -> const Bytes& {
    if (bf16.empty()) bf16 = random_bf16(n, k, 41);
    return bf16;
  };
  const auto add = [&](std::string name, const auto& make) -> Status {
    if (name.find(only) == std::string::npos) return {};
    Result<Weight> w = make(std::move(name));
    if (!w) return qload::fail(w.error());
    out.push_back(std::move(*w));
    return {};
  };
  const auto gptq = [&](std::uint32_t bits, GIdx g_idx) {
    return [=](std::string name) { return make_gptq(std::move(name), bits, g_idx, n, k); };
  };
  const auto awq = [&](bool gemv) { return [=](std::string name) { return make_awq(std::move(name), gemv, n, k); }; };
  const auto quantized = [&](fq::QuantizeTarget target) {
    return [&, target](std::string name) { return make_quantized(std::move(name), target, source(), n, k); };
  };
  const auto fp4 = [&](bool nv) { return [=](std::string name) { return make_fp4(std::move(name), nv, n, k); }; };
  QLOAD_TRY(add("gptq4 g128", gptq(4, GIdx::kNone)));
  QLOAD_TRY(add("gptq4 g128 g_idx=k/G", gptq(4, GIdx::kTrivial)));
  QLOAD_TRY(add("gptq4 g128 act-order", gptq(4, GIdx::kActOrder)));
  QLOAD_TRY(add("gptq3 g128", gptq(3, GIdx::kNone)));
  QLOAD_TRY(add("gptq8 g128", gptq(8, GIdx::kNone)));
  QLOAD_TRY(add("awq gemm g128", awq(false)));
  QLOAD_TRY(add("awq gemv g128", awq(true)));
  QLOAD_TRY(add("fp8 per-tensor", quantized(fq::QuantizeTarget::kFp8Tensor)));
  QLOAD_TRY(add("fp8 per-row", quantized(fq::QuantizeTarget::kFp8Row)));
  QLOAD_TRY(add("fp8 block 128x128", quantized(fq::QuantizeTarget::kFp8Block)));
  QLOAD_TRY(add("ct pack-quantized 4b g128", [&](std::string name) { return make_ct_pack4(std::move(name), n, k); }));
  QLOAD_TRY(add("ct int8 per-row", quantized(fq::QuantizeTarget::kInt8Row)));
  QLOAD_TRY(add("mxfp4 (gpt-oss)", fp4(false)));
  QLOAD_TRY(add("nvfp4 (compressed-tensors)", fp4(true)));
  if (k % 256 == 0) {  // GGUF's block types (ids and layouts: ggml_element.hpp)
    const auto ggml = [&](std::uint32_t type, std::uint32_t block_elems, std::uint32_t block_bytes,
                          std::vector<std::uint32_t> scale_offsets) {
      return [=](std::string name) -> Result<Weight> {
        return make_ggml(std::move(name), type, block_elems, block_bytes, scale_offsets, n, k);
      };
    };
    QLOAD_TRY(add("gguf Q4_0", ggml(2, 32, 18, {0})));
    QLOAD_TRY(add("gguf Q8_0", ggml(8, 32, 34, {0})));
    QLOAD_TRY(add("gguf Q2_K", ggml(10, 256, 84, {80, 82})));
    QLOAD_TRY(add("gguf Q3_K", ggml(11, 256, 110, {108})));
    QLOAD_TRY(add("gguf Q4_K", ggml(12, 256, 144, {0, 2})));
    QLOAD_TRY(add("gguf Q5_K", ggml(13, 256, 176, {0, 2})));
    QLOAD_TRY(add("gguf Q6_K", ggml(14, 256, 210, {208})));
    QLOAD_TRY(add("gguf IQ4_XS", ggml(23, 256, 136, {0})));
    QLOAD_TRY(add("gguf MXFP4", ggml(39, 32, 17, {0})));
  }
  return out;
}

}  // namespace qload::bench::quant

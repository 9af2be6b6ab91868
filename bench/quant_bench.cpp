// qload_quant_bench: CPU throughput of the quantized-weight decoders (quant_codec.hpp
// dequantize_rows) and of quantize on load, against memcpy of the same bytes in the same run.
//
// Every scheme qload decodes gets one random [N, K] weight (default 4096 x 4096, a llama
// hidden x hidden projection), built with the formats layer's own encoders (quant_pack.hpp;
// formats::quantize for FP8 and int8) exactly as a producer stores it. Each decode writes all N
// rows to bf16 and to f32, once on one thread and once split over T threads (std::thread, one
// contiguous row range each, T = hardware threads by default), the way the scheduler splits a
// tensor over workers. GB/s are of *output* bytes (10^9 bytes/s): a decode writes the
// dequantized weight, so a memcpy of that many bytes with the same number of threads is its
// ceiling, and the ratio says how far the arithmetic (and the reads of the packed parts) keep
// it from that. Quantize on load (bf16 -> fp8 per tensor / per row / 128x128 block, int8 per
// row) is reported in GB/s of *input* bytes against memcpy of the input.
//
// Every measurement is the best of --repeat runs (single runs on a shared machine scatter).
// By default every decode run writes into the same buffer, faulted in once (a destination already
// resident); --fresh-output gives each decode run, and its memcpy, a new mapping as the load's
// arena is (runtime HostBuffer, huge pages advised), mapped and unmapped outside the timer, so
// that the page faults and the kernel's zeroing a load pays are in the figure.
// Sanity: each decode's result is compared, byte for byte, with a second decode of the same
// weight over a different (uneven) row split, and the threaded result with both; the threaded
// quantize results with the single-threaded one. A mismatch or an error exits 1, so a broken
// benchmark cannot print numbers. --quick is a smoke run for ctest.
//
// --isa avx2 (or portable) decodes GGML blocks (avx2: also MXFP4 and NVFP4) through that
// instruction set's decoder alone (quant/row_decoders.hpp), so that a CPU with AVX-512 also
// measures what a CPU with only AVX2 (or neither) gets; the other schemes, and auto, go through
// dequantize_rows' own choice.
//
// --gpu N times the CUDA decoders instead (quant_cuda.hpp, parts already in device memory),
// against a device-to-device copy of the output bytes on the same stream, and checks every
// result against the CPU decoder's bytes (a NaN only has to be a NaN).
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

namespace {

using qload::DType;
using qload::Errc;
using qload::Error;
using qload::fail;
using qload::Result;
using qload::Shape;
using qload::Status;
namespace fq = qload::formats;
namespace fqd = qload::formats::detail;
using Bytes = std::vector<std::byte>;

constexpr std::uint64_t kGroupSize = 128;  // every grouped scheme, as the common checkpoints use

using qload::bench::best_seconds;

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

// ---- weights in every scheme ---------------------------------------------------------------

struct OwnedPart {
  std::string role;
  DType dtype = DType::kU8;
  Shape shape;
  Bytes bytes;
};

// One quantized weight: its geometry and its stored parts, as a checkpoint holds them.
struct Weight {
  std::string name;  // the scheme, as printed
  fq::LogicalTensor t;
  std::vector<OwnedPart> parts;

  void add(std::string role, DType dtype, Shape shape, Bytes bytes) {
    parts.push_back({std::move(role), dtype, std::move(shape), std::move(bytes)});
  }
  std::vector<fq::PartBytes> views() const {
    std::vector<fq::PartBytes> v;
    for (const OwnedPart& p : parts) v.push_back({p.role, p.dtype, p.shape, p.bytes});
    return v;
  }
  std::uint64_t stored_bytes() const {
    std::uint64_t sum = 0;
    for (const OwnedPart& p : parts) sum += p.bytes.size();
    return sum;
  }
};

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

// ---- measurements --------------------------------------------------------------------------

struct Options {
  std::uint64_t rows = 4096;
  std::uint64_t cols = 4096;
  int repeat = 3;
  unsigned threads = 0;
  int device = -1;            // a CUDA device: time the GPU decoders instead of the CPU ones
  std::string only;           // decode only the schemes whose name contains this, and skip quantize
  std::string isa = "auto";   // GGML blocks: auto (dequantize_rows' choice), avx2 or portable
  bool fresh_output = false;  // a new mapping per run (as the arena) instead of one resident buffer
};

// The best of --repeat runs of run(dst), dst `shared` or (--fresh-output) a new HostBuffer of
// its size each run, allocated and released outside the timer; then last(dst) on the last run's
// destination, untimed (a check of what it wrote).
template <typename Run, typename Last>
Result<double> best_seconds_into(const Options& o, std::span<std::byte> shared, Run&& run, Last&& last) {
  double best = 1e30;
  for (int r = 0; r < o.repeat; ++r) {
    qload::HostBuffer fresh;
    std::span<std::byte> dst = shared;
    if (o.fresh_output) {
      QLOAD_ASSIGN_OR_RETURN(fresh, qload::HostBuffer::allocate(shared.size()));
      dst = std::span(fresh.data(), shared.size());
    }
    const auto start = std::chrono::steady_clock::now();
    run(dst);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (r + 1 == o.repeat) last(dst);
  }
  return best;
}

// Throughput of one operation on 1 and on T threads, with memcpy of the same bytes beside it
// (0: not measured).
struct Speed {
  double gbps_1 = 0, memcpy_1 = 0, gbps_t = 0, memcpy_t = 0;
};

nlohmann::json speed_json(const Speed& s) {
  return {{"gbps_1", s.gbps_1}, {"memcpy_gbps_1", s.memcpy_1}, {"gbps_t", s.gbps_t}, {"memcpy_gbps_t", s.memcpy_t}};
}

// Runs body(i, begin, end) for `parts` contiguous ranges i of [0, n) whose boundaries are
// multiples of `align`, one std::thread each (the spawn is part of what is timed, as a pool
// wake-up would be); empty ranges are skipped.
void parallel_ranges(std::uint64_t n, unsigned parts, std::uint64_t align,
                     const std::function<void(unsigned, std::uint64_t, std::uint64_t)>& body) {
  std::vector<std::thread> threads;
  const std::uint64_t units = (n + align - 1) / align;
  for (unsigned i = 0; i < parts; ++i) {
    const std::uint64_t begin = std::min(n, units * i / parts * align);
    const std::uint64_t end = std::min(n, units * (i + 1) / parts * align);
    if (begin < end) threads.emplace_back(body, i, begin, end);
  }
  for (std::thread& t : threads) t.join();
}

// The first failure among per-thread results.
Status first_failure(std::vector<Status>& results) {
  for (Status& s : results)
    if (!s) return s;
  return {};
}

// memcpy of `bytes` from src to dst (or, --fresh-output, to new mappings of that size), on 1 and
// on T threads (each its own slice).
Status time_memcpy(const Options& o, const std::byte* src, std::byte* dst, std::uint64_t bytes, Speed& s) {
  const auto gbps = [bytes](double sec) { return static_cast<double>(bytes) / sec / 1e9; };
  const std::span<std::byte> shared(dst, bytes);
  const auto nothing = [](std::span<std::byte>) {};
  QLOAD_ASSIGN_OR_RETURN(const double one,
                         best_seconds_into(
                             o, shared, [&](std::span<std::byte> d) { std::memcpy(d.data(), src, bytes); }, nothing));
  QLOAD_ASSIGN_OR_RETURN(const double threaded, best_seconds_into(
                                                    o, shared,
                                                    [&](std::span<std::byte> d) {
                                                      parallel_ranges(bytes, o.threads, 4096,
                                                                      [&](unsigned, std::uint64_t b, std::uint64_t e) {
                                                                        std::memcpy(d.data() + b, src + b, e - b);
                                                                      });
                                                    },
                                                    nothing));
  s.memcpy_1 = gbps(one);
  s.memcpy_t = gbps(threaded);
  return {};
}

// Buffers as large as the largest output (f32), faulted in once, shared by every measurement.
struct Buffers {
  Bytes out;
  Bytes check;
};

// Rows [0, N) of `w` decoded to `dtype` into `out`: in one call (bounds empty), else one call
// per range between consecutive `bounds`, on a thread each when `threaded`.
// Rows [begin, end) of `w` to `dtype` at `out`: through dequantize_rows, or for GGML blocks with
// `isa` avx2 or portable through that decoder alone.
Status decode_range(const Weight& w, std::span<const fq::PartBytes> views, std::string_view isa, std::uint64_t begin,
                    std::uint64_t end, DType dtype, std::span<std::byte> out) {
  const fq::QuantScheme scheme = w.t.params.scheme;
  if (isa == "avx2" && (scheme == fq::QuantScheme::kMxfp4 || scheme == fq::QuantScheme::kNvfp4)) {
    // The parts are host memory here, so the device kernels' arguments describe them as they are.
    std::vector<const std::byte*> parts;
    for (const fq::PartBytes& v : views) parts.push_back(v.bytes.data());
    QLOAD_ASSIGN_OR_RETURN(const fqd::DequantArgs a,
                           fqd::describe_dequantize(w.t, views, parts, begin, end, dtype, out.data()));
    const bool decoded =
        scheme == fq::QuantScheme::kNvfp4
            ? fqd::decode_nvfp4_rows_avx2(a, begin, end, dtype, out.data())
            : fqd::decode_mxfp4_rows_avx2(a.codes, a.scale_codes, a.cols, begin, end, dtype, out.data());
    if (!decoded) return fail(Errc::kUnsupported, fmt::format("{}: this CPU has no AVX2 decoder for it", w.name));
    return {};
  }
  if (isa == "auto" || scheme != fq::QuantScheme::kGgml) return fq::dequantize_rows(w.t, views, begin, end, dtype, out);
  const auto* blocks = reinterpret_cast<const std::uint8_t*>(views.front().bytes.data());
  const std::uint64_t row_bytes = views.front().bytes.size() / w.t.rows;
  // The detail decoders write rows [begin, end) from `out` on, reading row n at blocks + n * row_bytes.
  if (isa == "portable")
    return fqd::decode_block_rows_portable(w.t.params.ggml_type, blocks, row_bytes, w.t.cols, begin, end, dtype,
                                           out.data());
  if (!fqd::decode_block_rows_avx2(w.t.params.ggml_type, blocks, row_bytes, w.t.cols, begin, end, dtype, out.data()))
    return fail(Errc::kUnsupported, fmt::format("{}: this CPU has no AVX2 decoder for it", w.name));
  return {};
}

Status decode(const Options& o, const Weight& w, std::span<const fq::PartBytes> views, DType dtype,
              const std::vector<std::uint64_t>& bounds, bool threaded, std::span<std::byte> out) {
  const std::uint64_t row_bytes = w.t.cols * qload::dtype_info(dtype).block_bytes;
  std::vector<Status> results(bounds.size() - 1);
  const auto run = [&](std::size_t i) {
    results[i] = decode_range(w, views, o.isa, bounds[i], bounds[i + 1], dtype,
                              out.subspan(bounds[i] * row_bytes, (bounds[i + 1] - bounds[i]) * row_bytes));
  };
  if (threaded) {
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i + 1 < bounds.size(); ++i) threads.emplace_back(run, i);
    for (std::thread& t : threads) t.join();
  } else {
    for (std::size_t i = 0; i + 1 < bounds.size(); ++i) run(i);
  }
  return first_failure(results);
}

// The timed threaded split: T equal row ranges. The check split shares no inner boundary with
// it or with the single call: rows [0, 1), [1, N/3 + 5), [N/3 + 5, N).
std::vector<std::uint64_t> even_bounds(std::uint64_t n, unsigned parts) {
  std::vector<std::uint64_t> b;
  for (unsigned i = 0; i <= parts; ++i) b.push_back(n * i / parts);
  b.erase(std::unique(b.begin(), b.end()), b.end());
  return b;
}
std::vector<std::uint64_t> odd_bounds(std::uint64_t n) {
  std::vector<std::uint64_t> b = {0, std::min<std::uint64_t>(1, n), std::min(n, n / 3 + 5), n};
  b.erase(std::unique(b.begin(), b.end()), b.end());
  return b;
}

Result<Speed> time_decode(const Options& o, const Weight& w, DType dtype, Buffers& buf) {
  const std::vector<fq::PartBytes> views = w.views();
  const std::uint64_t bytes = w.t.rows * w.t.cols * qload::dtype_info(dtype).block_bytes;
  const std::span<std::byte> out(buf.out.data(), bytes);
  const std::span<std::byte> check(buf.check.data(), bytes);
  const auto gbps = [bytes](double sec) { return static_cast<double>(bytes) / sec / 1e9; };
  const auto mismatch = [&](std::span<const std::byte> got, std::string_view which) -> Status {
    if (std::memcmp(got.data(), check.data(), bytes) == 0) return {};
    return fail(Errc::kInternal, fmt::format("{} -> {}: the {} decode differs from the decode split at other rows",
                                             w.name, qload::dtype_name(dtype), which));
  };
  Status status;  // the first failure of a timed run or of the last run's check
  const auto timed = [&](const std::vector<std::uint64_t>& bounds, bool threaded) {
    return [&, bounds, threaded](std::span<std::byte> dst) {
      if (status) status = decode(o, w, views, dtype, bounds, threaded, dst);
    };
  };
  const auto checked = [&](std::string_view which) {
    return [&, which](std::span<std::byte> dst) {
      if (status) status = mismatch(dst, which);
    };
  };

  std::memset(check.data(), 0xA5, bytes);  // a decode that writes nothing cannot match
  QLOAD_TRY(decode(o, w, views, dtype, odd_bounds(w.t.rows), false, check));
  Speed s;
  QLOAD_ASSIGN_OR_RETURN(const double one,
                         best_seconds_into(o, out, timed({0, w.t.rows}, false), checked("single-threaded")));
  QLOAD_TRY(status);
  std::memset(out.data(), 0x5A, bytes);
  QLOAD_ASSIGN_OR_RETURN(const double threaded,
                         best_seconds_into(o, out, timed(even_bounds(w.t.rows, o.threads), true), checked("threaded")));
  QLOAD_TRY(status);
  s.gbps_1 = gbps(one);
  s.gbps_t = gbps(threaded);
  QLOAD_TRY(time_memcpy(o, check.data(), out.data(), bytes, s));
  return s;
}

// Quantizes rows [r0, r1) of the bf16 [N, K] `in` into the matching rows of `weight` and of
// `scale` (block rows for kFp8Block: r0 and r1 are multiples of 128 or N; the one scale for
// kFp8Tensor, which is only ever called on all rows).
Status quantize_rows(std::span<const std::byte> in, std::uint64_t k, fq::QuantizeTarget target, std::uint64_t r0,
                     std::uint64_t r1, std::span<std::byte> weight, std::span<std::byte> scale) {
  if (target == fq::QuantizeTarget::kFp8Tensor)
    return fq::quantize(in.subspan(r0 * k * 2, (r1 - r0) * k * 2), DType::kBF16, r1 - r0, k, target,
                        weight.subspan(r0 * k, (r1 - r0) * k), scale);
  const bool block = target == fq::QuantizeTarget::kFp8Block;
  const std::uint64_t s0 = block ? r0 / 128 : r0;
  const std::uint64_t s1 = block ? (r1 + 127) / 128 : r1;
  const std::uint64_t scale_cols = block ? (k + 127) / 128 : 1;
  return fq::quantize(in.subspan(r0 * k * 2, (r1 - r0) * k * 2), DType::kBF16, r1 - r0, k, target,
                      weight.subspan(r0 * k, (r1 - r0) * k),
                      scale.subspan(s0 * scale_cols * 4, (s1 - s0) * scale_cols * 4));
}

// Quantize bf16 [N, K] to `target`: one call on one thread; on T threads, row ranges (multiples
// of 128 rows for blocks, so no block straddles two ranges) side by side, checked equal to the
// single call. A per-tensor scale needs the whole tensor's amax first, so no threaded figure.
Result<Speed> time_quantize(const Options& o, fq::QuantizeTarget target, const Bytes& in, Buffers& buf) {
  QLOAD_ASSIGN_OR_RETURN(const fq::QuantizedLayout layout, fq::quantized_layout(o.rows, o.cols, target));
  Bytes scale(layout.scale_bytes);
  Bytes scale_t(layout.scale_bytes);
  const std::span<std::byte> weight(buf.out.data(), layout.weight_bytes);
  const std::span<std::byte> weight_t(buf.check.data(), layout.weight_bytes);
  const auto gbps = [&](double sec) { return static_cast<double>(in.size()) / sec / 1e9; };
  Status status;
  Speed sp;
  sp.gbps_1 = gbps(best_seconds(o.repeat, [&] {
    if (status) status = quantize_rows(in, o.cols, target, 0, o.rows, weight, scale);
  }));
  QLOAD_TRY(status);
  if (target != fq::QuantizeTarget::kFp8Tensor) {
    const std::uint64_t align = target == fq::QuantizeTarget::kFp8Block ? 128 : 1;
    std::memset(weight_t.data(), 0x5A, weight_t.size());
    sp.gbps_t = gbps(best_seconds(o.repeat, [&] {
      std::vector<Status> results(o.threads);
      parallel_ranges(o.rows, o.threads, align, [&](unsigned i, std::uint64_t r0, std::uint64_t r1) {
        results[i] = quantize_rows(in, o.cols, target, r0, r1, weight_t, scale_t);
      });
      if (status) status = first_failure(results);
    }));
    QLOAD_TRY(status);
    if (std::memcmp(weight.data(), weight_t.data(), weight.size()) != 0 || scale != scale_t)
      return fail(Errc::kInternal, fmt::format("quantize bf16 -> {}: the threaded result differs from the single call",
                                               fq::quantize_target_name(target)));
  }
  Options resident = o;  // quantize writes into the shared buffers: its memcpy does too
  resident.fresh_output = false;
  QLOAD_TRY(time_memcpy(resident, in.data(), buf.out.data(), in.size(), sp));
  return sp;
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  if (!(f >> a >> b >> c)) return "unknown";
  return fmt::format("{} {} {}", a, b, c);
}

std::string ratio(double a, double b) {
  return b > 0 && a > 0 ? fmt::format("{:.2f}", a / b) : "-";
}
std::string gbps_text(double v) {
  return v > 0 ? fmt::format("{:.2f}", v) : "-";
}

void print_row(std::string_view name, std::string_view out, std::string_view bits, const Speed& s) {
  fmt::print("{:<26} {:<4} {:>6} {:>7} {:>7} {:>6} {:>7} {:>7} {:>6}\n", name, out, bits, gbps_text(s.gbps_1),
             gbps_text(s.memcpy_1), ratio(s.gbps_1, s.memcpy_1), gbps_text(s.gbps_t), gbps_text(s.memcpy_t),
             ratio(s.gbps_t, s.memcpy_t));
}

Status run_decodes(const Options& o, std::span<const Weight> weights, Buffers& buf, nlohmann::json& report) {
  fmt::print("\ndecode (dequantize_rows): GB/s of output; ratio = decode / memcpy of the same bytes, same threads\n");
  fmt::print("{:<26} {:<4} {:>6} {:>7} {:>7} {:>6} {:>7} {:>7} {:>6}\n", "scheme", "out", "bits/w", "1 thr", "memcpy",
             "ratio", fmt::format("{} thr", o.threads), "memcpy", "ratio");
  for (const Weight& w : weights) {
    const double bits_per_weight = static_cast<double>(w.stored_bytes()) * 8 / static_cast<double>(o.rows * o.cols);
    for (DType dtype : {DType::kBF16, DType::kF32}) {
      QLOAD_ASSIGN_OR_RETURN(const Speed s, time_decode(o, w, dtype, buf));
      print_row(w.name, dtype == DType::kBF16 ? "bf16" : "f32", fmt::format("{:.2f}", bits_per_weight), s);
      nlohmann::json row = speed_json(s);
      row["scheme"] = w.name;
      row["out_dtype"] = qload::dtype_name(dtype);
      row["stored_bytes"] = w.stored_bytes();
      row["out_bytes"] = o.rows * o.cols * qload::dtype_info(dtype).block_bytes;
      report["decode"].push_back(std::move(row));
    }
  }
  return {};
}

// ---- on a GPU (--device cuda:N) ------------------------------------------------------------

// One weight's parts in device memory (an allocation each, so every pointer is aligned).
struct DeviceParts {
  std::vector<qload::cuda::DeviceBuffer> buffers;
  std::vector<const std::byte*> pointers;
};

Result<DeviceParts> upload(const Weight& w, const qload::cuda::Stream& stream) {
  DeviceParts d;
  for (const OwnedPart& p : w.parts) {
    QLOAD_ASSIGN_OR_RETURN(qload::cuda::DeviceBuffer b,
                           qload::cuda::DeviceBuffer::allocate(stream.device(), p.bytes.size()));
    // Untimed set-up from pageable vectors: a synchronous copy (an async one would be staged
    // synchronously by the driver anyway, and the simulator reports it).
    QLOAD_TRY(qload::cuda::copy_to_device(b.data(), p.bytes.data(), p.bytes.size(), stream.device()));
    d.pointers.push_back(b.data());
    d.buffers.push_back(std::move(b));
  }
  QLOAD_TRY(stream.synchronize());
  return d;
}

// Seconds per call of `enqueue` (which launches work on `stream`): `calls` back-to-back launches
// and one synchronize, best of --repeat, after one untimed warm-up.
Result<double> device_seconds(const Options& o, const qload::cuda::Stream& stream, int calls,
                              const std::function<Status()>& enqueue) {
  QLOAD_TRY(enqueue());
  QLOAD_TRY(stream.synchronize());
  Status status;
  const double best = best_seconds(o.repeat, [&] {
    for (int i = 0; i < calls && status; ++i) status = enqueue();
    if (status) status = stream.synchronize();
  });
  QLOAD_TRY(status);
  return best / calls;
}

// Element-wise equality, where two NaNs are equal (device NaNs are canonical, docs/formats.md).
bool same_decode(std::span<const std::byte> a, std::span<const std::byte> b, DType dtype) {
  const std::size_t e = qload::dtype_info(dtype).block_bytes;
  for (std::size_t i = 0; i < a.size(); i += e) {
    if (std::memcmp(a.data() + i, b.data() + i, e) == 0) continue;
    std::uint32_t x = 0, y = 0;
    std::memcpy(&x, a.data() + i, e);
    std::memcpy(&y, b.data() + i, e);
    const std::uint32_t mag = e == 4 ? 0x7fffffffu : 0x7fffu;
    const std::uint32_t inf = e == 4 ? 0x7f800000u : dtype == DType::kBF16 ? 0x7f80u : 0x7c00u;
    if ((x & mag) <= inf || (y & mag) <= inf) return false;
  }
  return true;
}

// Every weight decoded by the CUDA kernels (quant_cuda.hpp) from parts already in device
// memory, to bf16 and f32; against a device-to-device copy of the output bytes on the same
// stream (cudaMemcpyAsync). Each result is checked against the CPU decoder's bytes.
Status run_gpu_decodes(const Options& o, std::span<const Weight> weights, int device, Buffers& buf,
                       nlohmann::json& report) {
  namespace cuda = qload::cuda;
  QLOAD_ASSIGN_OR_RETURN(const cuda::Stream stream, cuda::Stream::create(device));
  const std::uint64_t max_bytes = o.rows * o.cols * 4;
  QLOAD_ASSIGN_OR_RETURN(const cuda::DeviceBuffer out, cuda::DeviceBuffer::allocate(device, max_bytes));
  QLOAD_ASSIGN_OR_RETURN(const cuda::DeviceBuffer copy, cuda::DeviceBuffer::allocate(device, max_bytes));
  constexpr int kCalls = 20;
  fmt::print(
      "\ndecode on cuda:{} (dequantize_on_device, parts in device memory): GB/s of output; ratio = decode / "
      "device-to-device copy of the output bytes\n",
      device);
  fmt::print("{:<26} {:<4} {:>6} {:>8} {:>8} {:>6}\n", "scheme", "out", "bits/w", "GB/s", "d2d", "ratio");
  for (const Weight& w : weights) {
    QLOAD_ASSIGN_OR_RETURN(const DeviceParts parts, upload(w, stream));
    const std::vector<fq::PartBytes> views = w.views();
    const double bits_per_weight = static_cast<double>(w.stored_bytes()) * 8 / static_cast<double>(o.rows * o.cols);
    for (DType dtype : {DType::kBF16, DType::kF32}) {
      const std::uint64_t bytes = o.rows * o.cols * qload::dtype_info(dtype).block_bytes;
      QLOAD_ASSIGN_OR_RETURN(const double decode_s, device_seconds(o, stream, kCalls, [&] {
                               return fq::dequantize_on_device(w.t, views, parts.pointers, 0, w.t.rows, dtype,
                                                               out.data(), stream);
                             }));
      QLOAD_ASSIGN_OR_RETURN(const double copy_s, device_seconds(o, stream, kCalls, [&] {
                               return cuda::copy_on_device_async(copy.data(), out.data(), bytes, stream);
                             }));
      // The decode's bytes against the CPU's.
      const std::span<std::byte> got(buf.out.data(), bytes);
      const std::span<std::byte> want(buf.check.data(), bytes);
      QLOAD_TRY(cuda::copy_to_host(got.data(), out.data(), bytes, device));
      QLOAD_TRY(fq::dequantize_rows(w.t, views, 0, w.t.rows, dtype, want));
      if (!same_decode(got, want, dtype))
        return fail(Errc::kInternal, fmt::format("{} -> {}: the GPU decode differs from the CPU decode", w.name,
                                                 qload::dtype_name(dtype)));
      const double gbps = static_cast<double>(bytes) / decode_s / 1e9;
      const double d2d = static_cast<double>(bytes) / copy_s / 1e9;
      fmt::print("{:<26} {:<4} {:>6.2f} {:>8.1f} {:>8.1f} {:>6}\n", w.name, dtype == DType::kBF16 ? "bf16" : "f32",
                 bits_per_weight, gbps, d2d, ratio(gbps, d2d));
      report["gpu_decode"].push_back({{"scheme", w.name},
                                      {"out_dtype", qload::dtype_name(dtype)},
                                      {"stored_bytes", w.stored_bytes()},
                                      {"out_bytes", bytes},
                                      {"gbps", gbps},
                                      {"d2d_gbps", d2d}});
    }
  }
  return {};
}

Status run_quantizes(const Options& o, Buffers& buf, nlohmann::json& report) {
  fmt::print(
      "\nquantize on load (formats::quantize, bf16 in): GB/s of input; ratio = quantize / memcpy of the input\n");
  const Bytes in = random_bf16(o.rows, o.cols, 41);
  for (fq::QuantizeTarget target : {fq::QuantizeTarget::kFp8Tensor, fq::QuantizeTarget::kFp8Row,
                                    fq::QuantizeTarget::kFp8Block, fq::QuantizeTarget::kInt8Row}) {
    QLOAD_ASSIGN_OR_RETURN(const Speed s, time_quantize(o, target, in, buf));
    print_row(fmt::format("bf16 -> {}", fq::quantize_target_name(target)), "", "", s);
    nlohmann::json row = speed_json(s);
    row["target"] = fq::quantize_target_name(target);
    row["in_bytes"] = in.size();
    report["quantize"].push_back(std::move(row));
  }
  return {};
}

Status run(const Options& o, const std::string& json_path) {
  const std::string loadavg = load_average();
  fmt::print(
      "[{} x {}] weight, best of {} runs, T = {} threads, GGML blocks through the {} decoder, output to {}, load "
      "average {} (at start)\n",
      o.rows, o.cols, o.repeat, o.threads, o.isa == "auto" ? "library's choice of" : o.isa,
      o.fresh_output ? "a new mapping each run" : "one resident buffer", loadavg);
  QLOAD_ASSIGN_OR_RETURN(const std::vector<Weight> weights, make_weights(o.rows, o.cols, o.only));
  Buffers buf{Bytes(o.rows * o.cols * 4), Bytes(o.rows * o.cols * 4)};
  std::memset(buf.out.data(), 0, buf.out.size());  // fault the pages in before timing
  std::memset(buf.check.data(), 0, buf.check.size());
  nlohmann::json report = {{"schema", "qload.quant_bench/1"},
                           {"rows", o.rows},
                           {"cols", o.cols},
                           {"repeat", o.repeat},
                           {"threads", o.threads},
                           {"ggml_isa", o.isa},
                           {"fresh_output", o.fresh_output},
                           {"loadavg_start", loadavg}};
  if (o.device >= 0) {
    QLOAD_TRY(run_gpu_decodes(o, weights, o.device, buf, report));
  } else {
    QLOAD_TRY(run_decodes(o, weights, buf, report));
    if (o.only.empty()) QLOAD_TRY(run_quantizes(o, buf, report));
  }
  report["loadavg_end"] = load_average();
  fmt::print("\nevery decode matched a second decode over another row split; load average {} (at end)\n",
             load_average());
  if (json_path.empty()) return {};
  std::ofstream f(json_path);
  f << report.dump(2) << '\n';
  if (!f) return fail(Error(Errc::kIo, "cannot write the JSON report").with_file(json_path));
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"qload_quant_bench: CPU decode and quantize throughput of the quantized formats against memcpy"};
  Options o;
  bool quick = false;
  std::string json_path;
  app.add_option("--rows", o.rows, "N, output features (default 4096)")->check(CLI::PositiveNumber);
  app.add_option("--cols", o.cols, "K, input features, a multiple of 128 (default 4096)")->check(CLI::PositiveNumber);
  app.add_option("--repeat", o.repeat, "runs per measurement; the best counts (default 3)")->check(CLI::PositiveNumber);
  app.add_option("--threads", o.threads, "T, threads of the threaded runs (default: hardware threads)")
      ->check(CLI::PositiveNumber);
  app.add_option("--json", json_path, "also write the results as JSON to this file");
  app.add_flag("--quick", quick, "a smoke run: [256 x 512], 1 run");
  app.add_option("--only", o.only, "decode only the schemes whose name contains this (\"gguf\"), no quantize");
  app.add_option("--isa", o.isa,
                 "GGML blocks through one CPU decoder: auto (the library's choice), avx2 or portable; avx2 also "
                 "takes MXFP4 and NVFP4")
      ->check(CLI::IsMember({"auto", "avx2", "portable"}));
  app.add_flag("--fresh-output", o.fresh_output,
               "CPU decodes and their memcpy: each run writes into a new mapping, as a load's arena does (page faults "
               "timed), not into one resident buffer");
  app.add_option("--gpu", o.device, "time the CUDA decoders on this device instead of the CPU ones")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    o.rows = 256;
    o.cols = 512;
    o.repeat = 1;
  }
  if (o.threads == 0) o.threads = std::max(1u, std::thread::hardware_concurrency());
  if (o.cols % kGroupSize != 0 || o.rows % 8 != 0) {
    fmt::print(stderr, "--cols must be a multiple of {} and --rows of 8 (GPTQ / AWQ packing)\n", kGroupSize);
    return 64;
  }
  if (Status s = run(o, json_path); !s) {
    fmt::print(stderr, "qload_quant_bench: FAILED: {}\n", s.error().to_string());
    return 1;
  }
  return 0;
}

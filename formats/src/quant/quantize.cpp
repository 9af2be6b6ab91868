// Quantize on load (quant_codec.hpp): f32 / bf16 / f16 weights [N, K] to FP8 E4M3 with a per
// tensor, per row or 128x128 block scale, or to int8 with a per-row scale (symmetric).
//
// Rows are widened to f32 one at a time (convert.hpp) and read twice where a scale spans
// several rows (per tensor, per block): once for amax, once to encode; so the only temporary
// is one f32 row. The results depend only on f32 arithmetic (amax / 448, x / scale, one
// rounding each, then the integer encoder), never on how the loops are split.
//
// Decisions the header leaves open:
//   - amax is taken over finite values only: one Inf or NaN does not flatten its whole
//     block to zero. Inf then saturates (FP8 +-448, int8 +-127); NaN becomes the FP8 NaN code
//     (0x7F / 0xFF), and 0 in int8, which has no NaN.
//   - scale = amax / qmax rounded to f32; where that is 0 (amax 0, or a subnormal amax that
//     underflows) the scale is 1, so every value encodes as (nearly) 0 and nothing is 0 / 0.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "fp8_bits.hpp"
#include "qload/formats/convert.hpp"
#include "qload/formats/quant_codec.hpp"

namespace qload::formats {
namespace {

constexpr std::uint64_t kBlock = 128;  // fp8:block tiles (DeepSeek-V3's weight_block_size)
constexpr float kFp8Max = 448.0f;
constexpr float kInt8Max = 127.0f;

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) {
  return a / b + (a % b != 0 ? 1 : 0);
}

// The three loops below are compiled three times and picked once by the CPU's ISA level, as
// convert.cpp's are (GCC function multi-versioning): the same integer arithmetic and one
// division or addition per element in each, so the same bits, and -ffp-contract=off keeps FMA
// out of the AVX-512 one. Measured on the 2-vCPU VM (qload_quant_bench, bf16 in, one thread):
// 2.0-2.3x the baseline loop's speed for every target (fp8 0.52-0.59 -> 0.99-1.29 GB/s of
// input, int8 1.51 -> 3.44).
// One version under ThreadSanitizer: it instruments the ifunc resolvers, which run during
// relocation, before its runtime is up (a crash at start-up).
#if defined(QLOAD_HAS_TSAN)
#define QLOAD_QUANTIZE_CLONES
#else
#define QLOAD_QUANTIZE_CLONES [[gnu::target_clones("arch=x86-64-v4", "avx2", "default")]]
#endif

// The largest finite |x| as f32 bits (for non-negative floats, bit order is value order).
// Signed int32 because SSE2 compares only signed integers: the loop vectorises on baseline
// x86-64 (every value here is below 0x7f800000, so the order is the same).
QLOAD_QUANTIZE_CLONES std::int32_t amax_bits(const float* x, std::uint64_t count, std::int32_t start) {
  std::int32_t m = start;
  for (std::uint64_t i = 0; i < count; ++i) {
    std::int32_t a = std::bit_cast<std::int32_t>(x[i]) & 0x7fffffff;
    a = a < 0x7f800000 ? a : 0;
    m = a > m ? a : m;
  }
  return m;
}

float scale_for(std::int32_t amax, float qmax) {
  const float s = std::bit_cast<float>(amax) / qmax;
  return s == 0.0f ? 1.0f : s;
}

QLOAD_QUANTIZE_CLONES void encode_fp8(const float* x, std::uint64_t count, float scale, std::uint8_t* out) {
  for (std::uint64_t i = 0; i < count; ++i) out[i] = bits::f32_to_e4m3(std::bit_cast<std::uint32_t>(x[i] / scale));
}

// int8 on the bits of v = x / scale, with mask selects rather than float compares (GCC does
// not if-convert those after a division that may trap, so such a loop stays scalar):
// |v| is clamped to 127 (Inf and NaN included, NaN is then replaced by 0), and rounded half
// to even by adding 1.5 * 2^23, whose ulp is 1, so the f32 addition does the rounding (in
// the default rounding mode, which x / scale already relies on); the integer is then the
// low bits of the sum. Rounding half to even is symmetric, so the sign goes on last.
QLOAD_QUANTIZE_CLONES void encode_int8(const float* x, std::uint64_t count, float scale, std::int8_t* out) {
  constexpr float kRound = 12582912.0f;            // 1.5 * 2^23, bits 0x4b400000
  constexpr std::uint32_t kMaxBits = 0x42fe0000u;  // 127.0f
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint32_t v = std::bit_cast<std::uint32_t>(x[i] / scale);
    const std::uint32_t a = v & 0x7fffffffu;
    const std::uint32_t clamped = bits::select(a < kMaxBits, a, kMaxBits);
    std::uint32_t q = std::bit_cast<std::uint32_t>(std::bit_cast<float>(clamped) + kRound) - 0x4b400000u;
    q = bits::select(a > 0x7f800000u, 0u, q);
    q = bits::select((v >> 31) != 0u, 0u - q, q);
    out[i] = static_cast<std::int8_t>(q);  // two's complement (C++20)
  }
}

void store_scale(std::span<std::byte> scale, std::uint64_t index, float value) {
  std::memcpy(scale.data() + index * sizeof(float), &value, sizeof(float));
}

// Reads rows of the input as f32, one row at a time, into a buffer it owns.
class RowReader {
 public:
  RowReader(std::span<const std::byte> in, DType dtype, std::uint64_t cols)
      : in_(in), dtype_(dtype), cols_(cols), row_bytes_(cols * dtype_info(dtype).block_bytes), row_(cols) {}

  Result<const float*> row(std::uint64_t r) {
    QLOAD_TRY(
        convert(in_.subspan(r * row_bytes_, row_bytes_), dtype_, std::as_writable_bytes(std::span(row_)), DType::kF32));
    return row_.data();
  }
  std::uint64_t cols() const { return cols_; }

 private:
  std::span<const std::byte> in_;
  DType dtype_;
  std::uint64_t cols_;
  std::uint64_t row_bytes_;
  std::vector<float> row_;
};

Status quantize_fp8_tensor(RowReader& reader, std::uint64_t rows, std::uint8_t* w, std::span<std::byte> scale) {
  const std::uint64_t cols = reader.cols();
  std::int32_t amax = 0;
  for (std::uint64_t r = 0; r < rows; ++r) {
    QLOAD_ASSIGN_OR_RETURN(const float* x, reader.row(r));
    amax = amax_bits(x, cols, amax);
  }
  const float s = scale_for(amax, kFp8Max);
  for (std::uint64_t r = 0; r < rows; ++r) {
    QLOAD_ASSIGN_OR_RETURN(const float* x, reader.row(r));
    encode_fp8(x, cols, s, w + r * cols);
  }
  store_scale(scale, 0, s);
  return {};
}

Status quantize_per_row(RowReader& reader, std::uint64_t rows, bool int8, std::byte* w, std::span<std::byte> scale) {
  const std::uint64_t cols = reader.cols();
  for (std::uint64_t r = 0; r < rows; ++r) {
    QLOAD_ASSIGN_OR_RETURN(const float* x, reader.row(r));
    const float s = scale_for(amax_bits(x, cols, 0), int8 ? kInt8Max : kFp8Max);
    if (int8)
      encode_int8(x, cols, s, reinterpret_cast<std::int8_t*>(w + r * cols));
    else
      encode_fp8(x, cols, s, reinterpret_cast<std::uint8_t*>(w + r * cols));
    store_scale(scale, r, s);
  }
  return {};
}

// One band of up to 128 rows at a time: amax per 128-column block over the band, then encode.
// Edge blocks (N or K not a multiple of 128) use the amax of the elements they have.
Status quantize_fp8_block(RowReader& reader, std::uint64_t rows, std::uint8_t* w, std::span<std::byte> scale) {
  const std::uint64_t cols = reader.cols();
  const std::uint64_t blocks = ceil_div(cols, kBlock);
  std::vector<std::int32_t> amax(blocks);
  std::vector<float> s(blocks);
  for (std::uint64_t band = 0; band * kBlock < rows; ++band) {
    const std::uint64_t r0 = band * kBlock;
    const std::uint64_t r1 = std::min(rows, r0 + kBlock);
    std::fill(amax.begin(), amax.end(), 0);
    for (std::uint64_t r = r0; r < r1; ++r) {
      QLOAD_ASSIGN_OR_RETURN(const float* x, reader.row(r));
      for (std::uint64_t j = 0; j < blocks; ++j)
        amax[j] = amax_bits(x + j * kBlock, std::min(kBlock, cols - j * kBlock), amax[j]);
    }
    for (std::uint64_t j = 0; j < blocks; ++j) {
      s[j] = scale_for(amax[j], kFp8Max);
      store_scale(scale, band * blocks + j, s[j]);
    }
    for (std::uint64_t r = r0; r < r1; ++r) {
      QLOAD_ASSIGN_OR_RETURN(const float* x, reader.row(r));
      for (std::uint64_t j = 0; j < blocks; ++j)
        encode_fp8(x + j * kBlock, std::min(kBlock, cols - j * kBlock), s[j], w + r * cols + j * kBlock);
    }
  }
  return {};
}

#undef QLOAD_QUANTIZE_CLONES

}  // namespace

std::string_view quantize_target_name(QuantizeTarget target) noexcept {
  switch (target) {
    case QuantizeTarget::kFp8Tensor: return "fp8:per-tensor";
    case QuantizeTarget::kFp8Row: return "fp8:per-channel";
    case QuantizeTarget::kFp8Block: return "fp8:block";
    case QuantizeTarget::kInt8Row: return "int8";
  }
  return "?";
}

Result<QuantizeTarget> parse_quantize_target(std::string_view text) {
  if (text == "fp8" || text == "fp8:per-tensor") return QuantizeTarget::kFp8Tensor;
  if (text == "fp8:per-channel") return QuantizeTarget::kFp8Row;
  if (text == "fp8:block") return QuantizeTarget::kFp8Block;
  if (text == "int8") return QuantizeTarget::kInt8Row;
  return fail(Errc::kInvalidArgument,
              fmt::format("unknown quantization target '{}': valid are fp8 (= fp8:per-tensor), fp8:per-tensor, "
                          "fp8:per-channel, fp8:block, int8",
                          escape_for_terminal(text)));
}

Result<QuantizedLayout> quantized_layout(std::uint64_t rows, std::uint64_t cols, QuantizeTarget target) {
  QuantizedLayout layout;
  layout.weight_dtype = target == QuantizeTarget::kInt8Row ? DType::kI8 : DType::kF8_E4M3;
  layout.scale_suffix = target == QuantizeTarget::kFp8Block ? "weight_scale_inv" : "weight_scale";
  std::uint64_t scales = 1;
  switch (target) {
    case QuantizeTarget::kFp8Tensor: layout.scale_shape = Shape{1}; break;
    case QuantizeTarget::kFp8Row:
    case QuantizeTarget::kInt8Row:
      layout.scale_shape = Shape{rows, 1};
      scales = rows;
      break;
    case QuantizeTarget::kFp8Block: {
      layout.scale_shape = Shape{ceil_div(rows, kBlock), ceil_div(cols, kBlock)};
      QLOAD_ASSIGN_OR_RETURN(scales, checked_mul(ceil_div(rows, kBlock), ceil_div(cols, kBlock)));
      break;
    }
  }
  // Rows and columns come from a file: a zero-element weight is not in memory, so nothing
  // bounds them but these checks (one byte per element, four per scale).
  auto weight_bytes = checked_mul(rows, cols);
  if (!weight_bytes)
    return fail(Errc::kOverflow, fmt::format("quantizing [{}, {}] to {}: the weight's size exceeds 2^64", rows, cols,
                                             quantize_target_name(target)));
  if (scales > std::max(*weight_bytes, kMaxScalesBeyondElements))
    return fail(Errc::kUnsupported,
                fmt::format("quantizing [{}, {}] to {} needs {} scales, more than the weight's {} elements and the "
                            "{} a weight with fewer may have",
                            rows, cols, quantize_target_name(target), scales, *weight_bytes, kMaxScalesBeyondElements));
  layout.weight_bytes = *weight_bytes;
  layout.scale_bytes = scales * sizeof(float);  // scales <= max(rows * cols, 2^16): fits
  return layout;
}

Status quantize(std::span<const std::byte> in, DType in_dtype, std::uint64_t rows, std::uint64_t cols,
                QuantizeTarget target, std::span<std::byte> weight, std::span<std::byte> scale) {
  if (in_dtype != DType::kF32 && in_dtype != DType::kBF16 && in_dtype != DType::kF16)
    return fail(Errc::kInvalidArgument, fmt::format("quantize to {}: input dtype {}, expected F32, BF16 or F16",
                                                    quantize_target_name(target), dtype_name(in_dtype)));
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t numel, checked_mul(rows, cols));
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t in_bytes, checked_mul(numel, dtype_info(in_dtype).block_bytes));
  QLOAD_ASSIGN_OR_RETURN(const QuantizedLayout layout, quantized_layout(rows, cols, target));
  if (in.size() != in_bytes || weight.size() != layout.weight_bytes || scale.size() != layout.scale_bytes)
    return fail(Errc::kInvalidArgument,
                fmt::format("quantize [{}, {}] {} to {}: buffers of {} / {} / {} bytes, expected {} / {} / {}", rows,
                            cols, dtype_name(in_dtype), quantize_target_name(target), in.size(), weight.size(),
                            scale.size(), in_bytes, layout.weight_bytes, layout.scale_bytes));
  // No elements: no row to read (cols or rows may be huge, a row buffer or a loop over them
  // would be too), and every scale is that of an all-zero block, 1.
  if (numel == 0) {
    for (std::uint64_t i = 0; i < layout.scale_bytes / sizeof(float); ++i) store_scale(scale, i, 1.0f);
    return {};
  }
  RowReader reader(in, in_dtype, cols);
  auto* w = reinterpret_cast<std::uint8_t*>(weight.data());
  switch (target) {
    case QuantizeTarget::kFp8Tensor: return quantize_fp8_tensor(reader, rows, w, scale);
    case QuantizeTarget::kFp8Row: return quantize_per_row(reader, rows, false, weight.data(), scale);
    case QuantizeTarget::kInt8Row: return quantize_per_row(reader, rows, true, weight.data(), scale);
    case QuantizeTarget::kFp8Block: return quantize_fp8_block(reader, rows, w, scale);
  }
  return fail(Errc::kInternal, "unknown quantization target");
}

}  // namespace qload::formats

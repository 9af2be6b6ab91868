// Decoders and encoders for the schemes in quant.hpp, on host memory. Dequantization computes
// in f32 exactly as documented per scheme in quant.hpp (scale as f32, (q - z) as an exact
// integer converted to f32, one f32 multiply), so results are reproducible bit for bit (and
// equal on the GPU); the f32 result is then converted with convert.hpp when bf16/f16 is asked.
//
// Decoders work on a range of output rows so the scheduler can split one tensor over workers.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "qload/formats/quant.hpp"
#include "qload/runtime/dtype.hpp"
#include "qload/runtime/error.hpp"
#include "qload/runtime/shape.hpp"

namespace qload::formats {

// One part's bytes in host memory, with what the catalog says it is.
struct PartBytes {
  std::string_view role;
  DType dtype = DType::kU8;
  Shape shape;
  std::span<const std::byte> bytes;
};

// Expert `expert` of a stacked weight (LogicalTensor::experts > 1): the 2-D weight of
// rows / experts x cols, and each part's slice along its leading dim (shape without it).
// kCorrupt naming the tensor and the part when a part's leading dim is not the expert count.
struct ExpertView {
  LogicalTensor tensor;
  std::vector<PartBytes> parts;
};
Result<ExpertView> expert_view(const LogicalTensor& tensor, std::span<const PartBytes> parts, std::uint64_t expert);

// Rows [row_begin, row_end) of the dequantized [N, K] weight, row-major, into `out`
// ((row_end - row_begin) * K elements of `out_dtype`: F32, BF16 or F16). kInvalidArgument for
// sizes that do not match, kCorrupt for a g_idx entry out of range (naming the part and index).
Status dequantize_rows(const LogicalTensor& tensor, std::span<const PartBytes> parts, std::uint64_t row_begin,
                       std::uint64_t row_end, DType out_dtype, std::span<std::byte> out);

// Every check dequantize_rows makes (parts present, dtypes, shapes, g_idx and zero-point
// ranges), without decoding: for decoders that cannot report errors themselves (the GPU's).
Status check_quantized_parts(const LogicalTensor& tensor, std::span<const PartBytes> parts);

// Quantize on load: unquantized weights [N, K] (F32, BF16 or F16) to FP8 E4M3 with a per
// tensor, per row or 128x128 block scale, or to int8 with a per-row scale (symmetric).
enum class QuantizeTarget : std::uint8_t { kFp8Tensor, kFp8Row, kFp8Block, kInt8Row };
std::string_view quantize_target_name(QuantizeTarget target) noexcept;
// "fp8" (= fp8:per-tensor), "fp8:per-tensor", "fp8:per-channel", "fp8:block", "int8".
Result<QuantizeTarget> parse_quantize_target(std::string_view text);

struct QuantizedLayout {
  DType weight_dtype = DType::kF8_E4M3;  // F8_E4M3 or I8, shape [N, K]
  Shape scale_shape;                     // [1], [N, 1] or [ceil(N/128), ceil(K/128)]; F32
  std::string scale_suffix;              // "weight_scale" or "weight_scale_inv" (block, DeepSeek-V3 naming)
  std::uint64_t weight_bytes = 0;
  std::uint64_t scale_bytes = 0;
};
// kOverflow when N * K does not fit in 64 bits. The scale may have at most
// max(N * K, kMaxScalesBeyondElements) entries, else kUnsupported: only a zero-element weight
// can ask for more scales than it has elements ([N, 0] per-channel has N), and nothing else
// bounds its N (it is not in memory).
inline constexpr std::uint64_t kMaxScalesBeyondElements = std::uint64_t{1} << 16;
Result<QuantizedLayout> quantized_layout(std::uint64_t rows, std::uint64_t cols, QuantizeTarget target);

// Quantizes `in` ([rows, cols] of in_dtype) into `weight` and `scale` (sizes from
// quantized_layout). A zero-element weight has every scale 1 (that of an all-zero row or block). FP8: scale = amax /
// 448 per tensor / row / block (1 where amax is 0), value = fp8_e4m3(round-to-nearest-even(x / scale)) saturated to
// +-448; int8: scale = amax / 127, q = clamp(round_half_even(x / scale), -127, 127). Dequantized = q * scale.
Status quantize(std::span<const std::byte> in, DType in_dtype, std::uint64_t rows, std::uint64_t cols,
                QuantizeTarget target, std::span<std::byte> weight, std::span<std::byte> scale);

// FP8 codes <-> f32 (exact decode; encode rounds to nearest even and saturates to the max
// finite value, NaN stays NaN).
float fp8_e4m3_to_f32(std::uint8_t code) noexcept;
float fp8_e5m2_to_f32(std::uint8_t code) noexcept;
std::uint8_t f32_to_fp8_e4m3(float value) noexcept;

}  // namespace qload::formats

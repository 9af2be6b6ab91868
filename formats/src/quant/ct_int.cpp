// compressed-tensors int-quantized / naive-quantized decoder (../shared/formats.md section 4):
// weight I8 [N, K]; weight_scale [N, groups] / [N, 1] / [1] (F16, BF16, F32); optional
// weight_zero_point of the scale's shape (I8 or I32 values, required when asymmetric); optional
// weight_g_idx.
//   W[n, k] = scale[n, g] * (q[n, k] - zp[n, g]),  g = g_idx[k] or k / group_size
#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "bitstream.hpp"

namespace qload::formats::detail {
namespace {

constexpr std::array<DType, 1> kInt8 = {DType::kI8};
constexpr std::array<DType, 2> kZeroDtypes = {DType::kI8, DType::kI32};

std::uint64_t param_index(ScaleLayout layout, std::uint64_t n, std::uint64_t g, std::uint64_t groups) {
  switch (layout) {
    case ScaleLayout::kTensor: return 0;
    case ScaleLayout::kRow: return n;
    default: return n * groups + g;
  }
}

// |q - zp| stays below 2^24 with zero points in this range, so float(q - zp) is exact and the
// int32 subtraction cannot overflow.
constexpr std::int32_t kMaxZero = std::int32_t{1} << 23;

Result<std::int32_t> load_zero(const LogicalTensor& t, const PartBytes& zp, std::uint64_t index) {
  if (zp.dtype == DType::kI8) return static_cast<std::int8_t>(zp.bytes[index]);
  std::int32_t v;
  std::memcpy(&v, zp.bytes.data() + index * 4, 4);
  if (v < -kMaxZero || v > kMaxZero)
    return fail(Error(Errc::kCorrupt,
                      fmt::format("part '{}': entry {} is {}, not a zero point of int8 values", zp.role, index, v))
                    .with_tensor(t.name));
  return v;
}

}  // namespace

Status check_ct_int_zeros(const LogicalTensor& t, std::span<const PartBytes> parts) {
  for (const PartBytes& p : parts) {
    if (p.role != "weight_zero_point" || p.dtype != DType::kI32) continue;
    for (std::uint64_t i = 0; i < p.bytes.size() / 4; ++i) QLOAD_TRY(load_zero(t, p, i));
  }
  return {};
}

Status dequantize_ct_int(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                         std::uint64_t row_end, std::span<float> out) {
  if (t.params.scheme != QuantScheme::kCtInt) return fail(Errc::kInternal, "dequantize_ct_int: wrong scheme");
  QLOAD_ASSIGN_OR_RETURN(const PackedShapes shapes, packed_shapes(t));
  QLOAD_ASSIGN_OR_RETURN(const PartBytes* weight, checked_part(t, parts, "weight", kInt8, shapes.weight));
  QLOAD_ASSIGN_OR_RETURN(const PartBytes* scales, checked_part(t, parts, "weight_scale", kScaleDtypes, shapes.scales));
  const PartBytes* zp = nullptr;
  if (shapes.has_zeros) {
    QLOAD_ASSIGN_OR_RETURN(zp, checked_part(t, parts, "weight_zero_point", kZeroDtypes, shapes.zeros));
  } else {
    QLOAD_ASSIGN_OR_RETURN(zp, checked_optional_part(t, parts, "weight_zero_point", kZeroDtypes, shapes.scales));
  }
  QLOAD_ASSIGN_OR_RETURN(const PartBytes* g_idx,
                         checked_optional_part(t, parts, "weight_g_idx", kIndexDtypes, Shape{t.cols}));
  QLOAD_TRY(check_output(t, row_begin, row_end, out.size()));
  const std::uint64_t group_size = t.params.scale_layout == ScaleLayout::kGroup ? t.params.group_size : 0;
  QLOAD_ASSIGN_OR_RETURN(const GroupMap groups, make_group_map(t, t.cols, group_size, g_idx));

  const std::uint64_t k = t.cols;
  const ScaleLayout layout = t.params.scale_layout;
  std::vector<std::int32_t> q(static_cast<std::size_t>(k));
  std::vector<std::int32_t> z(static_cast<std::size_t>(groups.count), 0);
  std::vector<float> s(z.size());
  for (std::uint64_t r = row_begin; r < row_end; ++r) {
    for (std::uint64_t g = 0; g < groups.count; ++g) {
      const std::uint64_t i = param_index(layout, r, g, groups.count);
      s[g] = load_scale(*scales, i);
      if (zp == nullptr) continue;
      QLOAD_ASSIGN_OR_RETURN(z[g], load_zero(t, *zp, i));
    }
    const auto* row = reinterpret_cast<const std::int8_t*>(weight->bytes.data() + r * k);
    for (std::uint64_t i = 0; i < k; ++i) q[i] = row[i];
    dequant_span(q.data(), 0, k, groups, z.data(), s.data(), out.data() + (r - row_begin) * k);
  }
  return {};
}

}  // namespace qload::formats::detail

// compressed-tensors pack-quantized decoder (../shared/formats.md section 4). weight_packed
// [N, words] holds row n as a bitstream along K (dense, or 32/b fields to a word in the padded
// layout of older writers); values are offset binary: q = stored - 2^(b-1). Zero points
// (asymmetric) are packed along N: column g of weight_zero_point [zrows, groups] is a bitstream
// of N offset-binary fields. weight_scale [N, groups] / [N, 1] / [1]; weight_g_idx optional.
//   W[n, k] = scale[n, g] * (q[n, k] - zp[n, g]),  g = g_idx[k] or k / group_size
// Both offsets cancel when zero points are stored, so q - zp is computed from the stored codes;
// without them the zero is the offset 2^(b-1).
#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "bitstream.hpp"

namespace qload::formats::detail {
namespace {

constexpr std::array<DType, 2> kShapeDtypes = {DType::kI64, DType::kI32};

// weight_shape, when present, must say (N, K).
Status check_weight_shape(const LogicalTensor& t, const PartBytes* part) {
  if (part == nullptr) return {};
  const std::uint64_t elem = part->dtype == DType::kI64 ? 8 : 4;
  std::int64_t dims[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    if (elem == 8) {
      std::memcpy(&dims[i], part->bytes.data() + i * 8, 8);
    } else {
      std::int32_t d;
      std::memcpy(&d, part->bytes.data() + i * 4, 4);
      dims[i] = d;
    }
  }
  if (dims[0] < 0 || dims[1] < 0 || static_cast<std::uint64_t>(dims[0]) != t.rows ||
      static_cast<std::uint64_t>(dims[1]) != t.cols)
    return fail(Error(Errc::kCorrupt, fmt::format("part '{}' says ({}, {}), the weight is [{}, {}]", part->role,
                                                  dims[0], dims[1], t.rows, t.cols))
                    .with_tensor(t.name));
  return {};
}

// Index of scale (n, g) for the scale layout.
std::uint64_t scale_index(ScaleLayout layout, std::uint64_t n, std::uint64_t g, std::uint64_t groups) {
  switch (layout) {
    case ScaleLayout::kTensor: return 0;
    case ScaleLayout::kRow: return n;
    default: return n * groups + g;
  }
}

}  // namespace

Status dequantize_ct_packed(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                            std::uint64_t row_end, std::span<float> out) {
  QLOAD_ASSIGN_OR_RETURN(const PackedShapes shapes, packed_shapes(t));
  if (t.params.scheme != QuantScheme::kCtPacked) return fail(Errc::kInternal, "dequantize_ct_packed: wrong scheme");
  QLOAD_ASSIGN_OR_RETURN(const PartBytes* packed, checked_part(t, parts, "weight_packed", kWordDtypes, shapes.weight));
  QLOAD_ASSIGN_OR_RETURN(const PartBytes* scales, checked_part(t, parts, "weight_scale", kScaleDtypes, shapes.scales));
  const PartBytes* zp = nullptr;
  if (shapes.has_zeros) {
    QLOAD_ASSIGN_OR_RETURN(zp, checked_part(t, parts, "weight_zero_point", kWordDtypes, shapes.zeros));
  }
  QLOAD_ASSIGN_OR_RETURN(const PartBytes* g_idx,
                         checked_optional_part(t, parts, "weight_g_idx", kIndexDtypes, Shape{t.cols}));
  QLOAD_ASSIGN_OR_RETURN(const PartBytes* shape_part,
                         checked_optional_part(t, parts, "weight_shape", kShapeDtypes, Shape{2}));
  QLOAD_TRY(check_weight_shape(t, shape_part));
  QLOAD_TRY(check_output(t, row_begin, row_end, out.size()));
  const std::uint64_t group_size = t.params.scale_layout == ScaleLayout::kGroup ? t.params.group_size : 0;
  QLOAD_ASSIGN_OR_RETURN(const GroupMap groups, make_group_map(t, t.cols, group_size, g_idx));

  const unsigned b = t.params.bits;
  const bool dense = t.params.dense_bitstream;
  const std::uint64_t k = t.cols;
  const std::uint64_t wpr = shapes.weight[1];
  std::vector<std::int32_t> q(static_cast<std::size_t>(k));
  std::vector<std::int32_t> z(static_cast<std::size_t>(groups.count), std::int32_t{1} << (b - 1));
  std::vector<float> s(z.size());
  for (std::uint64_t r = row_begin; r < row_end; ++r) {
    for (std::uint64_t g = 0; g < groups.count; ++g) {
      s[g] = load_scale(*scales, scale_index(t.params.scale_layout, r, g, groups.count));
      if (zp == nullptr) continue;
      const std::byte* column = zp->bytes.data() + g * 4;
      z[g] = static_cast<std::int32_t>(dense ? get_field(column, groups.count, r, b)
                                             : get_padded_field(column, groups.count, r, b));
    }
    const std::byte* row = packed->bytes.data() + r * wpr * 4;
    if (dense) {
      unpack_stream(row, k, b, q.data());
    } else {
      unpack_padded(row, k, b, q.data());
    }
    dequant_span(q.data(), 0, k, groups, z.data(), s.data(), out.data() + (r - row_begin) * k);
  }
  return {};
}

}  // namespace qload::formats::detail

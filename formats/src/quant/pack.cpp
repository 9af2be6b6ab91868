// packed_shapes() and the encoders of quant_pack.hpp: integer codes to stored part bytes, laid
// out as the producers write them (../shared/formats.md sections 1, 2, 4).
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

#include <fmt/format.h>

#include "bitstream.hpp"
#include "qload/formats/quant_pack.hpp"

namespace qload::formats {
namespace {

using detail::ceil_div_u64;
using detail::field_mask;
using detail::stream_words;

// AWQ GEMM: column 8c + j sits in nibble kAwqNibble[j] of word c (inverse of [0,2,4,6,1,3,5,7]).
constexpr std::array<unsigned, 8> kAwqNibble = {0, 4, 1, 5, 2, 6, 3, 7};

std::unexpected<Error> unsupported(const LogicalTensor& t, std::string message) {
  return fail(Error(Errc::kUnsupported, std::move(message)).with_tensor(t.name));
}

// Scale shape and group count for compressed-tensors' scale layouts.
Status ct_scales(const LogicalTensor& t, std::uint64_t groups, PackedShapes& s) {
  switch (t.params.scale_layout) {
    case ScaleLayout::kTensor: s.scales = Shape{1}; break;
    case ScaleLayout::kRow: s.scales = Shape{t.rows, 1}; break;
    case ScaleLayout::kGroup: s.scales = Shape{t.rows, groups}; break;
    case ScaleLayout::kBlock: return unsupported(t, "compressed-tensors integer weights with block scales");
    case ScaleLayout::kColumn: return unsupported(t, "compressed-tensors integer weights with column scales");
  }
  s.groups = t.params.scale_layout == ScaleLayout::kGroup ? groups : 1;
  return {};
}

Result<PackedShapes> ct_packed_shapes(const LogicalTensor& t, std::uint64_t groups) {
  const QuantParams& p = t.params;
  if (p.bits < 1 || p.bits > 8)
    return unsupported(t, fmt::format("compressed-tensors pack-quantized with {} bits: qload decodes 1 to 8", p.bits));
  PackedShapes s;
  const bool dense = p.dense_bitstream;
  s.weight = Shape{t.rows, dense ? stream_words(t.cols, p.bits) : detail::padded_words(t.cols, p.bits)};
  QLOAD_TRY(ct_scales(t, groups, s));
  if (!p.sym) {
    if (p.scale_layout == ScaleLayout::kTensor)
      return unsupported(t, "compressed-tensors packed zero points with a per-tensor scale");
    s.has_zeros = true;
    s.zeros = Shape{dense ? stream_words(t.rows, p.bits) : detail::padded_words(t.rows, p.bits), s.groups};
  }
  return s;
}

Result<PackedShapes> awq_gemv_shapes(const LogicalTensor& t, std::uint64_t group_size, std::uint64_t groups) {
  // AutoAWQ calculate_zeros_width: ceil(groups / 8) rounded up to a multiple of 1, 2 or 4.
  std::uint64_t multiple = 0;
  if (group_size >= 128) {
    multiple = 1;
  } else if (group_size == 64) {
    multiple = 2;
  } else if (group_size == 32) {
    multiple = 4;
  } else {
    return unsupported(t, fmt::format("AWQ GEMV with group size {}: AutoAWQ defines 32, 64 and >= 128", group_size));
  }
  const std::uint64_t wz = ceil_div_u64(ceil_div_u64(groups, 8), multiple) * multiple;
  PackedShapes s;
  s.weight = Shape{t.rows, ceil_div_u64(t.cols, 8)};
  s.has_zeros = true;
  s.zeros = Shape{t.rows, wz};
  s.scales = Shape{t.rows, wz * 8};
  s.groups = groups;
  return s;
}

}  // namespace

Result<PackedShapes> packed_shapes(const LogicalTensor& t) {
  const QuantParams& p = t.params;
  const std::uint64_t n = t.rows;
  const std::uint64_t k = t.cols;
  const std::uint64_t group_size = p.group_size == 0 || p.group_size > k ? std::max<std::uint64_t>(k, 1) : p.group_size;
  const std::uint64_t groups = p.groups != 0 ? p.groups : ceil_div_u64(k, group_size);
  PackedShapes s;
  s.groups = groups;
  switch (p.scheme) {
    case QuantScheme::kGptq:
      if (p.bits != 2 && p.bits != 3 && p.bits != 4 && p.bits != 8)
        return unsupported(t, fmt::format("GPTQ with {} bits: qload decodes 2, 3, 4 and 8", p.bits));
      if (k % 32 != 0) return unsupported(t, fmt::format("GPTQ needs K a multiple of 32, K is {}", k));
      if (p.gptq_version != 1 && p.gptq_version != 2)
        return unsupported(t, fmt::format("GPTQ checkpoint format version {}", p.gptq_version));
      s.weight = Shape{k / 32 * p.bits, n};
      s.has_zeros = true;
      s.zeros = Shape{groups, stream_words(n, p.bits)};
      s.scales = Shape{groups, n};
      return s;
    case QuantScheme::kAwqGemm:
    case QuantScheme::kAwqGemv:
      if (p.bits != 4) return unsupported(t, fmt::format("AWQ with {} bits: AutoAWQ writes 4", p.bits));
      if (p.scheme == QuantScheme::kAwqGemv) return awq_gemv_shapes(t, group_size, groups);
      s.weight = Shape{k, ceil_div_u64(n, 8)};
      s.has_zeros = true;
      s.zeros = Shape{groups, ceil_div_u64(n, 8)};
      s.scales = Shape{groups, n};
      return s;
    case QuantScheme::kCtPacked: return ct_packed_shapes(t, groups);
    case QuantScheme::kCtInt:
      s.weight_dtype = DType::kI8;
      s.weight = Shape{n, k};
      QLOAD_TRY(ct_scales(t, groups, s));
      s.has_zeros = !p.sym;
      if (s.has_zeros) s.zeros = s.scales;
      return s;
    case QuantScheme::kFp8:
    case QuantScheme::kGgml:
    case QuantScheme::kMxfp4:
    case QuantScheme::kNvfp4:
    case QuantScheme::kBnb4:
    case QuantScheme::kBnb8: break;
  }
  return unsupported(t, fmt::format("{} is not an integer packed scheme", static_cast<int>(p.scheme)));
}

namespace {

Status wrong_size(const LogicalTensor& t, std::string_view what, std::uint64_t have, std::uint64_t want) {
  return fail(Error(Errc::kInvalidArgument, fmt::format("{}: {} elements given, {} expected for a [{}, {}] weight",
                                                        what, have, want, t.rows, t.cols))
                  .with_tensor(t.name));
}

Status check_elems(const LogicalTensor& t, std::string_view what, std::uint64_t have, std::uint64_t a,
                   std::uint64_t b) {
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t want, checked_mul(a, b));
  return have == want ? Status{} : wrong_size(t, what, have, want);
}

// An output part: exactly the bytes of `shape` in `dtype`; zeroed (encoders OR fields in).
Status check_out(const LogicalTensor& t, std::string_view what, std::span<std::byte> out, const Shape& shape,
                 DType dtype) {
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t want, shape.nbytes(dtype));
  if (out.size() != want)
    return fail(Error(Errc::kInvalidArgument, fmt::format("{}: {} bytes given, {} expected ({} {})", what, out.size(),
                                                          want, dtype_name(dtype), shape.to_string()))
                    .with_tensor(t.name));
  std::fill(out.begin(), out.end(), std::byte{0});
  return {};
}

template <typename T>
Status check_codes(const LogicalTensor& t, std::string_view what, std::span<const T> values, std::int32_t lo,
                   std::int32_t hi) {
  for (std::size_t i = 0; i < values.size(); ++i)
    if (values[i] < lo || values[i] > hi)
      return fail(Error(Errc::kInvalidArgument, fmt::format("{}[{}] is {}, outside [{}, {}] for {} bits", what, i,
                                                            static_cast<int>(values[i]), lo, hi, t.params.bits))
                      .with_tensor(t.name));
  return {};
}

Status require_scheme(const LogicalTensor& t, QuantScheme scheme, std::string_view fn) {
  if (t.params.scheme == scheme) return {};
  return fail(Error(Errc::kInvalidArgument, fmt::format("{} given a {} tensor", fn, static_cast<int>(t.params.scheme)))
                  .with_tensor(t.name));
}

// Common checks of the GPTQ / AWQ encoders: q [K][N], zeros [groups][N], codes < 2^bits.
Status check_kn_inputs(const LogicalTensor& t, const PackedShapes& s, std::span<const std::uint8_t> q,
                       std::span<const std::uint8_t> zeros) {
  QLOAD_TRY(check_elems(t, "q", q.size(), t.cols, t.rows));
  QLOAD_TRY(check_elems(t, "zeros", zeros.size(), s.groups, t.rows));
  const auto max = static_cast<std::int32_t>(field_mask(t.params.bits));
  QLOAD_TRY(check_codes(t, "q", q, 0, max));
  return check_codes(t, "zeros", zeros, 0, max);
}

}  // namespace

Status pack_gptq(const LogicalTensor& t, std::span<const std::uint8_t> q, std::span<const std::uint8_t> zeros,
                 std::span<std::byte> qweight, std::span<std::byte> qzeros) {
  QLOAD_TRY(require_scheme(t, QuantScheme::kGptq, "pack_gptq"));
  QLOAD_ASSIGN_OR_RETURN(const PackedShapes s, packed_shapes(t));
  QLOAD_TRY(check_kn_inputs(t, s, q, zeros));
  QLOAD_TRY(check_out(t, "qweight", qweight, s.weight, DType::kI32));
  QLOAD_TRY(check_out(t, "qzeros", qzeros, s.zeros, DType::kI32));
  const unsigned b = t.params.bits;
  const std::uint64_t n = t.rows;
  // Column c of qweight is a bitstream along K whose words lie N apart.
  for (std::uint64_t k = 0; k < t.cols; ++k)
    for (std::uint64_t c = 0; c < n; ++c) detail::or_field(qweight.data() + c * 4, n, k, b, q[k * n + c]);
  const std::uint64_t zw = s.zeros[1];
  const std::uint32_t mask = field_mask(b);
  const std::uint32_t word_offset =
      t.params.gptq_version == 1 && t.params.gptq_v1_whole_word ? gptq_v1_word_offset(b) : 0;
  for (std::uint64_t g = 0; g < s.groups; ++g)
    for (std::uint64_t c = 0; c < n; ++c) {
      const std::uint32_t z = zeros[g * n + c];
      const bool per_field = t.params.gptq_version == 1 && word_offset == 0;
      detail::or_field(qzeros.data() + g * zw * 4, 1, c, b, per_field ? (z - 1) & mask : z);
    }
  // GPTQModel writes v1 as the v2 words minus the offset, borrowing across fields.
  for (std::uint64_t i = 0; word_offset != 0 && i < s.groups * zw; ++i)
    detail::store_word(qzeros.data(), i, detail::load_word(qzeros.data(), i) - word_offset);
  return {};
}

Status pack_awq_gemm(const LogicalTensor& t, std::span<const std::uint8_t> q, std::span<const std::uint8_t> zeros,
                     std::span<std::byte> qweight, std::span<std::byte> qzeros) {
  QLOAD_TRY(require_scheme(t, QuantScheme::kAwqGemm, "pack_awq_gemm"));
  QLOAD_ASSIGN_OR_RETURN(const PackedShapes s, packed_shapes(t));
  QLOAD_TRY(check_kn_inputs(t, s, q, zeros));
  QLOAD_TRY(check_out(t, "qweight", qweight, s.weight, DType::kI32));
  QLOAD_TRY(check_out(t, "qzeros", qzeros, s.zeros, DType::kI32));
  const std::uint64_t n = t.rows;
  const std::uint64_t w = s.weight[1];
  const auto put = [n, w](std::span<std::byte> out, std::span<const std::uint8_t> in, std::uint64_t row) {
    for (std::uint64_t c = 0; c < n; ++c) {
      const std::uint64_t word = row * w + c / 8;
      const std::uint32_t v = std::uint32_t{in[row * n + c]} << (4 * kAwqNibble[c % 8]);
      detail::store_word(out.data(), word, detail::load_word(out.data(), word) | v);
    }
  };
  for (std::uint64_t k = 0; k < t.cols; ++k) put(qweight, q, k);
  for (std::uint64_t g = 0; g < s.groups; ++g) put(qzeros, zeros, g);
  return {};
}

Status pack_awq_gemv(const LogicalTensor& t, std::span<const std::uint8_t> q, std::span<const std::uint8_t> zeros,
                     std::span<const std::byte> scales, std::span<std::byte> qweight, std::span<std::byte> qzeros,
                     std::span<std::byte> scales_out) {
  QLOAD_TRY(require_scheme(t, QuantScheme::kAwqGemv, "pack_awq_gemv"));
  QLOAD_ASSIGN_OR_RETURN(const PackedShapes s, packed_shapes(t));
  QLOAD_TRY(check_kn_inputs(t, s, q, zeros));
  const DType sd = t.params.scale_dtype;
  if (sd != DType::kF16 && sd != DType::kBF16 && sd != DType::kF32)
    return fail(
        Error(Errc::kInvalidArgument, fmt::format("AWQ scales of dtype {}", dtype_name(sd))).with_tensor(t.name));
  const std::uint64_t elem = dtype_info(sd).block_bytes;
  QLOAD_TRY(check_elems(t, "scales", scales.size() / elem, s.groups, t.rows));
  if (scales.size() % elem != 0) return wrong_size(t, "scales (bytes)", scales.size(), s.groups * t.rows * elem);
  QLOAD_TRY(check_out(t, "qweight", qweight, s.weight, DType::kI32));
  QLOAD_TRY(check_out(t, "qzeros", qzeros, s.zeros, DType::kI32));
  QLOAD_TRY(check_out(t, "scales", scales_out, s.scales, sd));
  const std::uint64_t n = t.rows;
  const std::uint64_t wk = s.weight[1];
  const std::uint64_t wz = s.zeros[1];
  for (std::uint64_t r = 0; r < n; ++r) {
    for (std::uint64_t k = 0; k < t.cols; ++k) detail::or_field(qweight.data() + r * wk * 4, 1, k, 4, q[k * n + r]);
    for (std::uint64_t g = 0; g < s.groups; ++g) {
      detail::or_field(qzeros.data() + r * wz * 4, 1, g, 4, zeros[g * n + r]);
      std::memcpy(scales_out.data() + (r * wz * 8 + g) * elem, scales.data() + (g * n + r) * elem, elem);
    }
  }
  return {};
}

Status pack_ct(const LogicalTensor& t, std::span<const std::int8_t> q, std::span<const std::int8_t> zeros,
               std::span<std::byte> weight_packed, std::span<std::byte> zero_point) {
  QLOAD_TRY(require_scheme(t, QuantScheme::kCtPacked, "pack_ct"));
  QLOAD_ASSIGN_OR_RETURN(const PackedShapes s, packed_shapes(t));
  const unsigned b = t.params.bits;
  const std::int32_t offset = std::int32_t{1} << (b - 1);
  QLOAD_TRY(check_elems(t, "q", q.size(), t.rows, t.cols));
  QLOAD_TRY(check_codes(t, "q", q, -offset, offset - 1));
  QLOAD_TRY(check_out(t, "weight_packed", weight_packed, s.weight, DType::kI32));
  if (s.has_zeros) {
    QLOAD_TRY(check_elems(t, "zeros", zeros.size(), t.rows, s.groups));
    QLOAD_TRY(check_codes(t, "zeros", zeros, -offset, offset - 1));
    QLOAD_TRY(check_out(t, "weight_zero_point", zero_point, s.zeros, DType::kI32));
  } else if (!zeros.empty() || !zero_point.empty()) {
    return wrong_size(t, "zeros of a symmetric weight", zeros.size() + zero_point.size(), 0);
  }
  const bool dense = t.params.dense_bitstream;
  const auto put = [b, dense](std::byte* words, std::uint64_t stride, std::uint64_t i, std::int32_t v) {
    const auto code = static_cast<std::uint32_t>(v + (std::int32_t{1} << (b - 1)));
    if (dense) {
      detail::or_field(words, stride, i, b, code);
    } else {
      detail::or_padded_field(words, stride, i, b, code);
    }
  };
  const std::uint64_t wpr = s.weight[1];
  for (std::uint64_t r = 0; r < t.rows; ++r)
    for (std::uint64_t k = 0; k < t.cols; ++k) put(weight_packed.data() + r * wpr * 4, 1, k, q[r * t.cols + k]);
  if (s.has_zeros)  // packed along N: column g of the [zrows, groups] words is one bitstream
    for (std::uint64_t r = 0; r < t.rows; ++r)
      for (std::uint64_t g = 0; g < s.groups; ++g) put(zero_point.data() + g * 4, s.groups, r, zeros[r * s.groups + g]);
  return {};
}

}  // namespace qload::formats

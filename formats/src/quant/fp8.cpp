// FP8 codecs and the FP8 decoder (quant.hpp QuantScheme::kFp8). W[n,k] = f32(code) * scale,
// one f32 multiply, with the scale broadcast per tensor, row, block, group or column (ScaleLayout).
// "weight_scale_inv" (DeepSeek-V3 naming) is multiplied too: it is the inverse of the
// quantization scale (../shared/formats.md 3.2).
#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "decoders.hpp"
#include "fp8_bits.hpp"
#include "qload/formats/convert.hpp"
#include "row_decoders.hpp"

namespace qload::formats {

float fp8_e4m3_to_f32(std::uint8_t code) noexcept {
  return std::bit_cast<float>(bits::e4m3_to_f32(code));
}
float fp8_e5m2_to_f32(std::uint8_t code) noexcept {
  return std::bit_cast<float>(bits::e5m2_to_f32(code));
}
std::uint8_t f32_to_fp8_e4m3(float value) noexcept {
  return bits::f32_to_e4m3(std::bit_cast<std::uint32_t>(value));
}

namespace {

using detail::ScaleGrid;
using Table = std::array<float, 256>;

const Table& decode_table(DType dtype) {
  static const Table e4m3 = [] {
    Table t{};
    for (unsigned c = 0; c < 256; ++c) t[c] = fp8_e4m3_to_f32(static_cast<std::uint8_t>(c));
    return t;
  }();
  static const Table e5m2 = [] {
    Table t{};
    for (unsigned c = 0; c < 256; ++c) t[c] = fp8_e5m2_to_f32(static_cast<std::uint8_t>(c));
    return t;
  }();
  return dtype == DType::kF8_E5M2 ? e5m2 : e4m3;
}

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) {
  return a / b + (a % b != 0 ? 1 : 0);
}

Error shape_error(const LogicalTensor& t, const PartBytes& p, std::string_view expected, std::string_view why) {
  return Error(Errc::kCorrupt, fmt::format("FP8 part '{}' has shape {}, expected {} ({} of a [{}, {}] weight)", p.role,
                                           p.shape.to_string(), expected, why, t.rows, t.cols))
      .with_tensor(t.name);
}

Status check_bytes(const LogicalTensor& t, const PartBytes& p, std::uint64_t numel) {
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t expected, checked_mul(numel, dtype_info(p.dtype).block_bytes));
  if (p.bytes.size() != expected)
    return fail(Error(Errc::kCorrupt, fmt::format("FP8 part '{}' ({} {}) holds {} bytes, expected {}", p.role,
                                                  dtype_name(p.dtype), p.shape.to_string(), p.bytes.size(), expected))
                    .with_tensor(t.name));
  return {};
}

Status check_weight(const LogicalTensor& t, const PartBytes& w) {
  if (w.dtype != DType::kF8_E4M3 && w.dtype != DType::kF8_E5M2)
    return fail(Error(Errc::kCorrupt, fmt::format("FP8 part '{}' has dtype {}, expected F8_E4M3 or F8_E5M2", w.role,
                                                  dtype_name(w.dtype)))
                    .with_tensor(t.name));
  const DType declared = t.params.weight_dtype;
  if ((declared == DType::kF8_E4M3 || declared == DType::kF8_E5M2) && declared != w.dtype)
    return fail(Error(Errc::kCorrupt, fmt::format("FP8 part '{}' has dtype {}, the quantization config says {}", w.role,
                                                  dtype_name(w.dtype), dtype_name(declared)))
                    .with_tensor(t.name));
  if (w.shape != Shape{t.rows, t.cols}) return fail(shape_error(t, w, Shape{t.rows, t.cols}.to_string(), "the weight"));
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t numel, w.shape.numel());  // kOverflow for a hostile shape
  return check_bytes(t, w, numel);
}

Result<ScaleGrid> check_scale(const LogicalTensor& t, const PartBytes& s) {
  if (s.dtype != DType::kF32 && s.dtype != DType::kBF16 && s.dtype != DType::kF16)
    return fail(Error(Errc::kCorrupt,
                      fmt::format("FP8 part '{}' has dtype {}, expected F32, BF16 or F16", s.role, dtype_name(s.dtype)))
                    .with_tensor(t.name));
  const std::uint64_t n = t.rows;
  const std::uint64_t k = t.cols;
  const QuantParams& p = t.params;
  ScaleGrid grid;
  std::uint64_t numel = 1;
  switch (p.scale_layout) {
    case ScaleLayout::kTensor:
      if (s.shape != Shape{} && s.shape != Shape{1}) return fail(shape_error(t, s, "[] or [1]", "per-tensor scale"));
      grid = {std::max<std::uint64_t>(n, 1), std::max<std::uint64_t>(k, 1), 1};
      break;
    case ScaleLayout::kRow:
      if (s.shape != Shape{n, 1} && s.shape != Shape{n})
        return fail(shape_error(t, s, fmt::format("[{}, 1] or [{}]", n, n), "per-row scale"));
      grid = {1, std::max<std::uint64_t>(k, 1), 1};
      numel = n;
      break;
    case ScaleLayout::kBlock: {
      if (p.block_rows == 0 || p.block_cols == 0)
        return fail(
            Error(Errc::kInvalidArgument, fmt::format("FP8 block scale with a {}x{} block", p.block_rows, p.block_cols))
                .with_tensor(t.name));
      const Shape expected{ceil_div(n, p.block_rows), ceil_div(k, p.block_cols)};
      if (s.shape != expected)
        return fail(
            shape_error(t, s, expected.to_string(), fmt::format("{}x{} block scale", p.block_rows, p.block_cols)));
      grid = {p.block_rows, p.block_cols, expected[1]};
      numel = expected[0] * expected[1];
      break;
    }
    case ScaleLayout::kColumn:  // one scale per column, every row: Llama-4's transposed experts
      if (s.shape != Shape{1, k} && s.shape != Shape{k, 1} && s.shape != Shape{k})
        return fail(shape_error(t, s, fmt::format("[1, {}], [{}, 1] or [{}]", k, k, k), "per-column scale"));
      grid = {std::max<std::uint64_t>(n, 1), 1, k};
      numel = k;
      break;
    case ScaleLayout::kGroup: {
      if (p.group_size == 0)
        return fail(Error(Errc::kInvalidArgument, "FP8 group scale with group size 0").with_tensor(t.name));
      const Shape expected{n, ceil_div(k, p.group_size)};
      if (s.shape != expected)
        return fail(shape_error(t, s, expected.to_string(), fmt::format("group-{} scale", p.group_size)));
      grid = {1, p.group_size, expected[1]};
      numel = expected[0] * expected[1];
      break;
    }
  }
  QLOAD_TRY(check_bytes(t, s, numel));
  return grid;
}

// Segments at least this long are decoded through a table of code * scale (the same f32
// products, computed once per segment), shorter ones multiply per element.
constexpr std::uint64_t kScaledTableMin = 1024;

void decode_segment(const std::uint8_t* w, float* out, std::uint64_t count, const Table& table, float scale) {
  if (count >= kScaledTableMin) {
    Table scaled;
    for (unsigned c = 0; c < 256; ++c) scaled[c] = table[c] * scale;
    for (std::uint64_t i = 0; i < count; ++i) out[i] = scaled[w[i]];
    return;
  }
  for (std::uint64_t i = 0; i < count; ++i) out[i] = table[w[i]] * scale;
}

}  // namespace

namespace detail {

Result<Fp8Parts> checked_fp8_parts(const LogicalTensor& t, std::span<const PartBytes> parts) {
  Fp8Parts out;
  QLOAD_ASSIGN_OR_RETURN(out.weight, find_part(t, parts, "weight"));
  for (const PartBytes& p : parts)
    if (p.role == "weight_scale_inv") out.scale = &p;
  if (out.scale == nullptr) {
    QLOAD_ASSIGN_OR_RETURN(out.scale, find_part(t, parts, "weight_scale"));
  }
  QLOAD_TRY(check_weight(t, *out.weight));
  QLOAD_ASSIGN_OR_RETURN(out.grid, check_scale(t, *out.scale));
  return out;
}

Status dequantize_fp8(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                      std::uint64_t row_end, std::span<float> out) {
  QLOAD_ASSIGN_OR_RETURN(const Fp8Parts checked, checked_fp8_parts(t, parts));
  const PartBytes* weight = checked.weight;
  const PartBytes* scale = checked.scale;
  const ScaleGrid& grid = checked.grid;
  const std::uint64_t cols = t.cols;
  if (row_begin > row_end || row_end > t.rows || out.size() != (row_end - row_begin) * cols)
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("rows [{}, {}) of {} into {} floats", row_begin, row_end, t.rows, out.size()))
                    .with_tensor(t.name));

  const Table& table = decode_table(weight->dtype);
  const auto* codes = reinterpret_cast<const std::uint8_t*>(weight->bytes.data());
  if (t.params.scale_layout == ScaleLayout::kColumn) {  // each row times the same vector of scales
    std::vector<float> scales(static_cast<std::size_t>(cols));
    for (std::uint64_t k = 0; k < cols; ++k) scales[k] = load_scale(*scale, k);
    for (std::uint64_t n = row_begin; n < row_end; ++n) {
      const std::uint8_t* w = codes + n * cols;
      float* o = out.data() + (n - row_begin) * cols;
      for (std::uint64_t k = 0; k < cols; ++k) o[k] = table[w[k]] * scales[k];
    }
    return {};
  }
  for (std::uint64_t n = row_begin; n < row_end; ++n) {
    const std::uint8_t* w = codes + n * cols;
    float* o = out.data() + (n - row_begin) * cols;
    const std::uint64_t scale_row = (n / grid.rows_per_scale) * grid.scale_cols;
    for (std::uint64_t k0 = 0, j = 0; k0 < cols; k0 += grid.cols_per_scale, ++j) {
      const std::uint64_t count = std::min(grid.cols_per_scale, cols - k0);
      decode_segment(w + k0, o + k0, count, table, load_scale(*scale, scale_row + j));
    }
  }
  return {};
}

// Narrowed products of one scale: the bits dequantize_fp8's f32 element (code's value times the
// scale, one rounding) gets from convert() to BF16 or F16, narrowed by convert() itself.
using NarrowTable = std::array<std::uint16_t, 256>;
Status narrow_products(const Table& table, float scale, DType dtype, NarrowTable& out) {
  Table products;
  for (unsigned c = 0; c < 256; ++c) products[c] = table[c] * scale;
  return convert(std::as_bytes(std::span(products)), DType::kF32, std::as_writable_bytes(std::span(out)), dtype);
}

// A table costs 256 products and narrowings, so a scale must cover many elements to pay for
// it: per tensor, per row and 128x128 blocks (16384) do; groups of 128 along a row do not.
constexpr std::uint64_t kFp8TableMin = 1024;

Result<bool> dequantize_fp8_narrow(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                                   std::uint64_t row_end, DType dtype, std::span<std::byte> out) {
  if ((dtype != DType::kBF16 && dtype != DType::kF16) || t.params.scale_layout == ScaleLayout::kColumn) return false;
  QLOAD_ASSIGN_OR_RETURN(const Fp8Parts checked, checked_fp8_parts(t, parts));
  const ScaleGrid& grid = checked.grid;
  const std::uint64_t cols = t.cols;
  // The elements each table serves in this call (its rows of the scale's band, at most).
  if (std::min(row_end - row_begin, grid.rows_per_scale) * grid.cols_per_scale < kFp8TableMin) return false;
  if (row_begin > row_end || row_end > t.rows || out.size() != (row_end - row_begin) * cols * 2)
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("rows [{}, {}) of {} into {} bytes", row_begin, row_end, t.rows, out.size()))
                    .with_tensor(t.name));
  const Table& table = decode_table(checked.weight->dtype);
  const auto* codes = reinterpret_cast<const std::uint8_t*>(checked.weight->bytes.data());
  std::vector<NarrowTable> tables(static_cast<std::size_t>(grid.scale_cols));  // one band of scales
  std::byte* o = out.data();
  for (std::uint64_t n = row_begin; n < row_end;) {
    const std::uint64_t scale_row = n / grid.rows_per_scale;
    const std::uint64_t band_end = std::min(row_end, (scale_row + 1) * grid.rows_per_scale);
    for (std::uint64_t j = 0; j < grid.scale_cols; ++j)
      QLOAD_TRY(narrow_products(table, load_scale(*checked.scale, scale_row * grid.scale_cols + j), dtype, tables[j]));
    for (; n < band_end; ++n) {
      const std::uint8_t* w = codes + n * cols;
      for (std::uint64_t k0 = 0, j = 0; k0 < cols; k0 += grid.cols_per_scale, ++j) {
        const std::uint64_t end = std::min(cols, k0 + grid.cols_per_scale);
        const std::uint16_t* narrowed = tables[j].data();
        if (lookup_words_avx512(narrowed, w + k0, end - k0, o)) {
          o += 2 * (end - k0);
          continue;
        }
        for (std::uint64_t k = k0; k < end; ++k, o += 2) std::memcpy(o, &narrowed[w[k]], 2);
      }
    }
  }
  return true;
}

}  // namespace detail
}  // namespace qload::formats

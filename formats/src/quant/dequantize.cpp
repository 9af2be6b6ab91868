// dequantize_rows: f32 decode by scheme (decoders.hpp), then the float conversion codec for
// bf16 / f16 output. Large row ranges are decoded a slab at a time so the f32 temporary stays
// small and cache-resident.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "decoders.hpp"
#include "qload/formats/convert.hpp"

namespace qload::formats {
namespace detail {

Result<const PartBytes*> find_part(const LogicalTensor& tensor, std::span<const PartBytes> parts,
                                   std::string_view role) {
  for (const PartBytes& p : parts)
    if (p.role == role) return &p;
  return fail(Error(Errc::kCorrupt, fmt::format("quantized weight has no '{}' part", role)).with_tensor(tensor.name));
}

float load_scale(const PartBytes& part, std::uint64_t index) noexcept {
  const std::byte* p = part.bytes.data();
  std::uint32_t bits = 0;  // 0.0f for any other dtype: callers check scale dtypes first
  if (part.dtype == DType::kF32) {
    std::memcpy(&bits, p + index * 4, 4);
  } else if (part.dtype == DType::kF16 || part.dtype == DType::kBF16) {
    std::uint16_t h;
    std::memcpy(&h, p + index * 2, 2);
    bits = part.dtype == DType::kF16 ? f16_to_f32_bits(h) : bf16_to_f32_bits(h);
  }
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

}  // namespace detail

namespace {

Status decode_f32(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t begin, std::uint64_t end,
                  std::span<float> out) {
  switch (t.params.scheme) {
    case QuantScheme::kGptq: return detail::dequantize_gptq(t, parts, begin, end, out);
    case QuantScheme::kAwqGemm:
    case QuantScheme::kAwqGemv: return detail::dequantize_awq(t, parts, begin, end, out);
    case QuantScheme::kFp8: return detail::dequantize_fp8(t, parts, begin, end, out);
    case QuantScheme::kCtPacked: return detail::dequantize_ct_packed(t, parts, begin, end, out);
    case QuantScheme::kCtInt: return detail::dequantize_ct_int(t, parts, begin, end, out);
    case QuantScheme::kGgml: return detail::dequantize_ggml(t, parts, begin, end, out);
    case QuantScheme::kMxfp4: return detail::dequantize_mxfp4(t, parts, begin, end, out);
    case QuantScheme::kNvfp4: return detail::dequantize_nvfp4(t, parts, begin, end, out);
    case QuantScheme::kBnb4: return detail::dequantize_bnb4(t, parts, begin, end, out);
    case QuantScheme::kBnb8: return detail::dequantize_bnb8(t, parts, begin, end, out);
  }
  return fail(Errc::kInternal, "unknown quantization scheme");
}

// 1 MiB of f32 per conversion step: small enough to stay in L2, large enough that per-call
// setup in the decoders (the g_idx group map is O(K)) is amortised over tens of rows.
constexpr std::uint64_t kSlabFloats = std::uint64_t{1} << 18;

// Stacked experts: each expert's rows decoded as the 2-D weight it is.
Status decode_experts(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t begin, std::uint64_t end,
                      DType out_dtype, std::span<std::byte> out) {
  const std::uint64_t n = t.rows / t.experts;
  const std::uint64_t row_bytes = t.cols * dtype_info(out_dtype).block_bytes;
  for (std::uint64_t e = begin / std::max<std::uint64_t>(n, 1); e < t.experts && e * n < end; ++e) {
    const std::uint64_t a = std::max(begin, e * n), b = std::min(end, (e + 1) * n);
    QLOAD_ASSIGN_OR_RETURN(const ExpertView view, expert_view(t, parts, e));
    QLOAD_TRY(dequantize_rows(
        view.tensor, view.parts, a - e * n, b - e * n, out_dtype,
        out.subspan(static_cast<std::size_t>((a - begin) * row_bytes), static_cast<std::size_t>((b - a) * row_bytes))));
  }
  return {};
}

}  // namespace

Result<ExpertView> expert_view(const LogicalTensor& tensor, std::span<const PartBytes> parts, std::uint64_t expert) {
  const std::uint64_t experts = tensor.experts;
  if (experts == 0 || expert >= experts || tensor.rows % experts != 0)
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("expert {} of a weight of {} experts and {} rows", expert, experts, tensor.rows))
                    .with_tensor(tensor.name));
  ExpertView view{.tensor = tensor, .parts = {}};
  view.tensor.rows = tensor.rows / experts;
  view.tensor.shape = Shape{};
  view.tensor.experts = 0;
  for (const PartBytes& p : parts) {
    if (p.shape.rank() == 0 || p.shape[0] != experts || p.bytes.size() % experts != 0)
      return fail(Error(Errc::kCorrupt, fmt::format("part '{}' of a weight of {} stacked experts is {} ({} bytes): "
                                                    "expected its leading dim to be {}",
                                                    p.role, experts, p.shape.to_string(), p.bytes.size(), experts))
                      .with_tensor(tensor.name));
    const std::size_t size = p.bytes.size() / static_cast<std::size_t>(experts);
    view.parts.push_back({.role = p.role,
                          .dtype = p.dtype,
                          .shape = Shape(std::vector<std::uint64_t>(p.shape.dims().begin() + 1, p.shape.dims().end())),
                          .bytes = p.bytes.subspan(static_cast<std::size_t>(expert) * size, size)});
  }
  return view;
}

Status check_quantized_parts(const LogicalTensor& tensor, std::span<const PartBytes> parts) {
  // Decoding no rows runs every check that does not depend on the row: part presence, dtypes,
  // shapes, weight_shape and g_idx ranges. CT int zero points are checked as rows are decoded,
  // so they are scanned here.
  if (tensor.experts > 0 && !detail::stacked_rows_are_flat(tensor)) {
    for (std::uint64_t e = 0; e < tensor.experts; ++e) {
      QLOAD_ASSIGN_OR_RETURN(const ExpertView view, expert_view(tensor, parts, e));
      QLOAD_TRY(check_quantized_parts(view.tensor, view.parts));
      // No elements: every expert's view has the same (empty) geometry and nothing of theirs
      // is read; the expert count itself is bounded by nothing then.
      if (tensor.rows == 0 || tensor.cols == 0) break;
    }
    return {};
  }
  QLOAD_TRY(decode_f32(tensor, parts, 0, 0, {}));
  if (tensor.params.scheme == QuantScheme::kCtInt) QLOAD_TRY(detail::check_ct_int_zeros(tensor, parts));
  return {};
}

Status dequantize_rows(const LogicalTensor& tensor, std::span<const PartBytes> parts, std::uint64_t row_begin,
                       std::uint64_t row_end, DType out_dtype, std::span<std::byte> out) {
  if (row_begin > row_end || row_end > tensor.rows)
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("rows [{}, {}) outside the weight's {}", row_begin, row_end, tensor.rows))
                    .with_tensor(tensor.name));
  if (out_dtype != DType::kF32 && out_dtype != DType::kBF16 && out_dtype != DType::kF16)
    return fail(Errc::kInvalidArgument, fmt::format("dequantize to {}: only F32, BF16, F16", dtype_name(out_dtype)));
  const std::uint64_t elem = dtype_info(out_dtype).block_bytes;
  const std::uint64_t cols = tensor.cols;
  auto elems = checked_mul(row_end - row_begin, cols);
  auto bytes = elems ? checked_mul(*elems, elem) : elems;
  if (!bytes || out.size() != *bytes)
    return fail(Error(Errc::kInvalidArgument, fmt::format("output of {} bytes for {} rows of {} {}", out.size(),
                                                          row_end - row_begin, cols, dtype_name(out_dtype)))
                    .with_tensor(tensor.name));
  // No elements to write (K = 0 with any number of rows, or no rows): the parts are checked, and
  // no decoder loops over rows that have nothing in them.
  if (*bytes == 0) return check_quantized_parts(tensor, parts);
  if (tensor.experts > 0 && !detail::stacked_rows_are_flat(tensor))
    return decode_experts(tensor, parts, row_begin, row_end, out_dtype, out);
  const bool aligned = reinterpret_cast<std::uintptr_t>(out.data()) % alignof(float) == 0;
  if (tensor.params.scheme == QuantScheme::kGgml && (out_dtype != DType::kF32 || aligned))
    return detail::dequantize_ggml(tensor, parts, row_begin, row_end, out_dtype, out);  // any dtype, in L1
  if (tensor.params.scheme == QuantScheme::kMxfp4) {
    QLOAD_ASSIGN_OR_RETURN(const bool decoded,
                           detail::dequantize_mxfp4_direct(tensor, parts, row_begin, row_end, out_dtype, out));
    if (decoded) return {};
  }
  if (tensor.params.scheme == QuantScheme::kNvfp4) {
    QLOAD_ASSIGN_OR_RETURN(const bool decoded,
                           detail::dequantize_nvfp4_direct(tensor, parts, row_begin, row_end, out_dtype, out));
    if (decoded) return {};
  }
  if (reinterpret_cast<std::uintptr_t>(out.data()) % elem == 0) {  // GPTQ and AWQ GEMV: their own stores
    if (tensor.params.scheme == QuantScheme::kGptq) {
      QLOAD_ASSIGN_OR_RETURN(const bool decoded,
                             detail::dequantize_gptq_direct(tensor, parts, row_begin, row_end, out_dtype, out));
      if (decoded) return {};
    }
    if (tensor.params.scheme == QuantScheme::kAwqGemv) {
      QLOAD_ASSIGN_OR_RETURN(const bool decoded,
                             detail::dequantize_awq_direct(tensor, parts, row_begin, row_end, out_dtype, out));
      if (decoded) return {};
    }
  }
  if (tensor.params.scheme == QuantScheme::kFp8) {
    QLOAD_ASSIGN_OR_RETURN(const bool decoded,
                           detail::dequantize_fp8_narrow(tensor, parts, row_begin, row_end, out_dtype, out));
    if (decoded) return {};
  }
  if (out_dtype == DType::kF32 && aligned) {
    auto* f = reinterpret_cast<float*>(out.data());
    return decode_f32(tensor, parts, row_begin, row_end,
                      std::span(f, static_cast<std::size_t>((row_end - row_begin) * cols)));
  }
  const std::uint64_t slab_rows = std::max<std::uint64_t>(1, kSlabFloats / std::max<std::uint64_t>(cols, 1));
  std::vector<float> tmp;
  for (std::uint64_t r = row_begin; r < row_end; r += slab_rows) {
    const std::uint64_t n = std::min(slab_rows, row_end - r);
    tmp.resize(static_cast<std::size_t>(n * cols));
    QLOAD_TRY(decode_f32(tensor, parts, r, r + n, tmp));
    const auto in = std::as_bytes(std::span(tmp));
    QLOAD_TRY(convert(
        in, DType::kF32,
        out.subspan(static_cast<std::size_t>((r - row_begin) * cols * elem), static_cast<std::size_t>(n * cols * elem)),
        out_dtype));
  }
  return {};
}

}  // namespace qload::formats

// OCP MXFP4 as gpt-oss checkpoints ship it (QuantScheme::kMxfp4): finding the weights, and the
// CPU decoder, which runs the kernels' element arithmetic (dequantize_element.hpp) row by row.
// compressed-tensors' mxfp4-pack-quantized stores the same bytes as weight_packed [N, K/2] and
// weight_scale [N, K/32] (detect_parts.cpp finds those).
#include <algorithm>

#include <fmt/format.h>

#include "decoders.hpp"
#include "fp4_rows.hpp"
#include "row_decoders.hpp"

namespace qload::formats::detail {
namespace {

constexpr std::string_view kBlocks = "_blocks", kScales = "_scales";

Error tensor_error(const Catalog& catalog, const TensorEntry& t, std::string message) {
  return Error(Errc::kCorrupt, std::move(message))
      .with_tensor(t.name)
      .with_file(t.file < catalog.files.size() ? catalog.files[t.file].path : std::string())
      .with_offset(t.offset);
}

}  // namespace

Status detect_mxfp4(const Catalog& catalog, QuantizedCatalog& out) {
  for (std::uint32_t i = 0; i < catalog.tensors.size(); ++i) {
    const TensorEntry& blocks = catalog.tensors[i];
    if (!blocks.name.ends_with(kBlocks)) continue;
    const std::string name = blocks.name.substr(0, blocks.name.size() - kBlocks.size());
    const TensorEntry* scales = catalog.find(name + std::string(kScales));
    const std::size_t rank = blocks.shape.rank();
    if (scales == nullptr)
      return fail(tensor_error(catalog, blocks, fmt::format("MXFP4 blocks without their '{}{}'", name, kScales)));
    // blocks [..., G, 16] U8 and scales [..., G] U8, the same leading dims.
    bool matches = blocks.dtype == DType::kU8 && scales->dtype == DType::kU8 && rank >= 2 &&
                   blocks.shape[rank - 1] == 16 && scales->shape.rank() == rank - 1;
    for (std::size_t d = 0; matches && d + 1 < rank; ++d) matches = blocks.shape[d] == scales->shape[d];
    if (!matches)
      return fail(tensor_error(catalog, blocks,
                               fmt::format("MXFP4 blocks {} {} and scales {} {}: expected U8 [..., G, 16] and U8 "
                                           "[..., G]",
                                           dtype_name(blocks.dtype), blocks.shape.to_string(),
                                           dtype_name(scales->dtype), scales->shape.to_string())));
    std::vector<std::uint64_t> dims(blocks.shape.dims().begin(), blocks.shape.dims().end() - 1);
    auto cols = checked_mul(dims.back(), 32);  // G blocks of 32 elements
    if (!cols) return fail(Error(Errc::kOverflow, "the MXFP4 weight's column count exceeds 2^64").with_tensor(name));
    dims.back() = *cols;
    LogicalTensor t{.name = name,
                    .params = {.scheme = QuantScheme::kMxfp4,
                               .bits = 4,
                               .group_size = 32,
                               .weight_dtype = DType::kU8,
                               .scale_dtype = DType::kF8_E8M0},
                    .rows = 1,
                    .cols = dims.back(),
                    .shape = Shape(dims),
                    .parts = {{"blocks", i}, {"scales", static_cast<std::uint32_t>(scales - catalog.tensors.data())}}};
    // Bounded by the blocks' byte size, unless a dim is 0: then the others may be anything.
    for (std::size_t d = 0; d + 1 < dims.size(); ++d) {
      auto rows = checked_mul(t.rows, dims[d]);
      if (!rows) return fail(Error(Errc::kOverflow, "the MXFP4 weight's row count exceeds 2^64").with_tensor(name));
      t.rows = *rows;
    }
    if (dims.size() == 3) t.experts = dims[0];
    out.logical.push_back(std::move(t));
  }
  return {};
}

Mxfp4Roles mxfp4_roles(std::span<const PartBytes> parts) {
  if (std::ranges::any_of(parts, [](const PartBytes& p) { return p.role == "weight_packed"; }))
    return {.blocks = "weight_packed", .scales = "weight_scale"};
  return {.blocks = "blocks", .scales = "scales"};
}

namespace {

// The weight's codes and exponents, after checking their sizes against its rows and columns.
Result<DequantArgs> mxfp4_args(const LogicalTensor& t, std::span<const PartBytes> parts) {
  const Mxfp4Roles roles = mxfp4_roles(parts);
  QLOAD_ASSIGN_OR_RETURN(const PartBytes* blocks, find_part(t, parts, roles.blocks));
  QLOAD_ASSIGN_OR_RETURN(const PartBytes* scales, find_part(t, parts, roles.scales));
  const std::uint64_t groups = t.cols / 32;
  if (t.cols % 32 != 0 || blocks->bytes.size() != t.rows * groups * 16 || scales->bytes.size() != t.rows * groups)
    return fail(Error(Errc::kCorrupt, fmt::format("MXFP4 blocks of {} bytes and scales of {} bytes for {} rows of {}",
                                                  blocks->bytes.size(), scales->bytes.size(), t.rows, t.cols))
                    .with_tensor(t.name));
  DequantArgs a;
  a.cols = t.cols;
  a.groups = groups;
  a.codes = reinterpret_cast<const std::uint8_t*>(blocks->bytes.data());
  a.scale_codes = reinterpret_cast<const std::uint8_t*>(scales->bytes.data());
  return a;
}

}  // namespace

Status dequantize_mxfp4(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                        std::uint64_t row_end, std::span<float> out) {
  QLOAD_ASSIGN_OR_RETURN(const DequantArgs a, mxfp4_args(t, parts));
  decode_fp4_rows<element::Mxfp4>(a, 32, row_begin, row_end, out.data());
  return {};
}

Result<bool> dequantize_mxfp4_direct(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                                     std::uint64_t row_end, DType dtype, std::span<std::byte> out) {
  QLOAD_ASSIGN_OR_RETURN(const DequantArgs a, mxfp4_args(t, parts));
  return decode_mxfp4_rows_avx512(a.codes, a.scale_codes, a.cols, row_begin, row_end, dtype, out.data()) ||
         decode_mxfp4_rows_avx2(a.codes, a.scale_codes, a.cols, row_begin, row_end, dtype, out.data());
}

}  // namespace qload::formats::detail

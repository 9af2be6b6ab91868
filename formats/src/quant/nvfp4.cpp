// NVFP4 (QuantScheme::kNvfp4) as compressed-tensors' nvfp4-pack-quantized and ModelOpt's NVFP4
// store it: the CPU decoders, which run the kernels' element arithmetic (dequantize_element.hpp)
// row by row: the AVX2 one (rows_avx2.cpp) where the CPU has it, else the portable one. The
// parts were matched by detect_parts.cpp; their byte sizes are checked here again (a shard's, or
// a caller's own).
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "decoders.hpp"
#include "fp4_rows.hpp"
#include "row_decoders.hpp"

namespace qload::formats::detail {

Result<Nvfp4Global> nvfp4_global(const LogicalTensor& t, std::span<const PartBytes> parts) {
  const bool modelopt = std::ranges::any_of(parts, [](const PartBytes& p) { return p.role == "weight_scale_2"; });
  const std::string_view role = modelopt ? "weight_scale_2" : "weight_global_scale";
  QLOAD_ASSIGN_OR_RETURN(const PartBytes* global, find_part(t, parts, role));
  if (global->dtype != DType::kF32 || global->bytes.size() != sizeof(float))
    return fail(Error(Errc::kCorrupt, fmt::format("NVFP4 {} is {} of {} bytes, expected one F32", role,
                                                  dtype_name(global->dtype), global->bytes.size()))
                    .with_tensor(t.name));
  Nvfp4Global g{.packed = modelopt ? "weight" : "weight_packed", .multiplies = modelopt};
  std::memcpy(&g.value, global->bytes.data(), sizeof g.value);
  return g;
}

namespace {

// The weight's codes, scales and global scale, after checking their sizes against its rows and
// columns.
Result<DequantArgs> nvfp4_args(const LogicalTensor& t, std::span<const PartBytes> parts) {
  QLOAD_ASSIGN_OR_RETURN(const Nvfp4Global global, nvfp4_global(t, parts));
  QLOAD_ASSIGN_OR_RETURN(const PartBytes* packed, find_part(t, parts, global.packed));
  QLOAD_ASSIGN_OR_RETURN(const PartBytes* scales, find_part(t, parts, "weight_scale"));
  const std::uint64_t groups = t.cols / 16;
  if (t.cols % 16 != 0 || packed->bytes.size() != t.rows * (t.cols / 2) || scales->dtype != DType::kF8_E4M3 ||
      scales->bytes.size() != t.rows * groups)
    return fail(Error(Errc::kCorrupt, fmt::format("NVFP4 {} of {} bytes and {} weight_scale of {} bytes "
                                                  "for {} rows of {}",
                                                  global.packed, packed->bytes.size(), dtype_name(scales->dtype),
                                                  scales->bytes.size(), t.rows, t.cols))
                    .with_tensor(t.name));
  DequantArgs a;
  a.cols = t.cols;
  a.groups = groups;
  a.codes = reinterpret_cast<const std::uint8_t*>(packed->bytes.data());
  a.scale_codes = reinterpret_cast<const std::uint8_t*>(scales->bytes.data());
  a.global_scale = global.value;
  a.global_multiplies = global.multiplies;
  return a;
}

}  // namespace

Status dequantize_nvfp4(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                        std::uint64_t row_end, std::span<float> out) {
  QLOAD_ASSIGN_OR_RETURN(const DequantArgs a, nvfp4_args(t, parts));
  decode_fp4_rows<element::Nvfp4>(a, 16, row_begin, row_end, out.data());
  return {};
}

Result<bool> dequantize_nvfp4_direct(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                                     std::uint64_t row_end, DType dtype, std::span<std::byte> out) {
  QLOAD_ASSIGN_OR_RETURN(const DequantArgs a, nvfp4_args(t, parts));
  return decode_nvfp4_rows_avx512(a, row_begin, row_end, dtype, out.data()) ||
         decode_nvfp4_rows_avx2(a, row_begin, row_end, dtype, out.data());
}

}  // namespace qload::formats::detail

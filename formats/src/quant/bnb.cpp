// bitsandbytes 4-bit (QuantScheme::kBnb4) as transformers saves it: each weight's parts hang
// under its name (`<w>`, `<w>.absmax`, `<w>.quant_map`, `<w>.nested_absmax`,
// `<w>.nested_quant_map`) and `<w>.quant_state.bitsandbytes__nf4` (or `__fp4`) is a U8 tensor
// of JSON: {"quant_type", "blocksize", "dtype", "shape": [N, K], "nested_blocksize",
// "nested_offset", "nested_dtype"}. The catalog read that JSON (Catalog::embedded); here it is
// checked against the parts, and the CPU decoder runs the kernels' element (dequantize_element.hpp).
#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/format.h>

#include "../located_error.hpp"
#include "decoders.hpp"
#include "dequantize_element.hpp"
#include "qload/formats/strict_json.hpp"

namespace qload::formats::detail {
namespace {

constexpr std::string_view kState = ".quant_state.bitsandbytes__";

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) {
  return a / b + (a % b != 0 ? 1 : 0);
}

bool power_of_two_in(std::uint64_t v, std::uint64_t lo, std::uint64_t hi) {
  return v >= lo && v <= hi && (v & (v - 1)) == 0;
}

struct State {
  std::string quant_type;
  std::uint64_t blocksize = 0;
  std::uint64_t rows = 0, cols = 0;
  std::uint64_t nested_block = 0;  // 0: not double-quantized
  float nested_offset = 0.0f;
};

Result<State> parse_state(const Catalog& catalog, const TensorEntry& entry, const std::string& text) {
  const std::string& path = catalog.files[entry.file].path;
  const auto bad = [&](std::string what) {
    return fail(
        located(Errc::kCorrupt, "bitsandbytes quant_state: " + std::move(what), path, entry.name, entry.offset));
  };
  QLOAD_ASSIGN_OR_RETURN(const nlohmann::json j, parse_strict_json_object(text, path));
  State s;
  const auto type = j.find("quant_type");
  const auto block = j.find("blocksize");
  const auto shape = j.find("shape");
  if (type == j.end() || !type->is_string()) return bad("no quant_type string");
  s.quant_type = type->get<std::string>();
  if (s.quant_type != "nf4" && s.quant_type != "fp4")
    return bad(fmt::format("quant_type {}", quote_name(s.quant_type)));
  if (block == j.end() || !block->is_number_unsigned() || !power_of_two_in(block->get<std::uint64_t>(), 16, 1 << 20))
    return bad("blocksize is not a power of two from 16 to 2^20");
  s.blocksize = block->get<std::uint64_t>();
  if (shape == j.end() || !shape->is_array() || shape->size() != 2 || !(*shape)[0].is_number_unsigned() ||
      !(*shape)[1].is_number_unsigned())
    return bad("shape is not [N, K]");
  s.rows = (*shape)[0].get<std::uint64_t>();
  s.cols = (*shape)[1].get<std::uint64_t>();
  if (s.rows == 0 || s.cols == 0 || s.rows > (std::uint64_t{1} << 31) || s.cols > (std::uint64_t{1} << 31))
    return bad(fmt::format("shape [{}, {}]", s.rows, s.cols));
  if (const auto nested = j.find("nested_blocksize"); nested != j.end()) {
    const auto offset = j.find("nested_offset");
    if (!nested->is_number_unsigned() || !power_of_two_in(nested->get<std::uint64_t>(), 16, 1 << 20))
      return bad("nested_blocksize is not a power of two from 16 to 2^20");
    if (offset == j.end() || !offset->is_number() || !std::isfinite(offset->get<double>()))
      return bad("double quantization without a finite nested_offset");
    s.nested_block = nested->get<std::uint64_t>();
    s.nested_offset = static_cast<float>(offset->get<double>());  // an f32 value, written as a Python float
  }
  return s;
}

}  // namespace

Status detect_bnb4(const Catalog& catalog, QuantizedCatalog& out) {
  for (const auto& [name, text] : catalog.embedded) {
    const std::size_t at = name.rfind(kState);
    if (at == std::string::npos) continue;
    const TensorEntry& entry = *catalog.find(name);
    const std::string weight = name.substr(0, at);
    QLOAD_ASSIGN_OR_RETURN(const State s, parse_state(catalog, entry, text));
    if (name.substr(at + kState.size()) != s.quant_type)
      return fail(located(Errc::kCorrupt,
                          fmt::format("the tensor's name says {} but its quant_type is {}",
                                      quote_name(name.substr(at + kState.size())), quote_name(s.quant_type)),
                          catalog.files[entry.file].path, name));
    const std::uint64_t elements = s.rows * s.cols;
    const std::uint64_t blocks = ceil_div(elements, s.blocksize);
    LogicalTensor t{.name = weight,
                    .params = {.scheme = QuantScheme::kBnb4,
                               .bits = 4,
                               .group_size = s.blocksize,
                               .weight_dtype = DType::kU8,
                               .scale_dtype = s.nested_block == 0 ? DType::kF32 : DType::kU8,
                               .bnb_fp4 = s.quant_type == "fp4",
                               .nested_block = s.nested_block,
                               .nested_offset = s.nested_offset},
                    .rows = s.rows,
                    .cols = s.cols};
    // Each part: present, of its dtype, with exactly the elements the state implies.
    const auto part = [&](std::string role, const std::string& tensor, DType dtype, std::uint64_t count) -> Status {
      const TensorEntry* p = catalog.find(tensor);
      if (p == nullptr)
        return fail(located(Errc::kCorrupt, fmt::format("bitsandbytes weight without its {}", quote_name(tensor)),
                            catalog.files[entry.file].path, weight));
      if (p->dtype != dtype || p->nbytes != count * dtype_info(dtype).block_bytes)
        return fail(located(
            Errc::kCorrupt,
            fmt::format("bitsandbytes {} ([{}, {}], block {}): expected {} elements of {}, found {} {}", role, s.rows,
                        s.cols, s.blocksize, count, dtype_name(dtype), dtype_name(p->dtype), p->shape.to_string()),
            catalog.files[p->file].path, tensor, p->offset));
      t.parts.emplace_back(std::move(role), static_cast<std::uint32_t>(p - catalog.tensors.data()));
      return {};
    };
    QLOAD_TRY(part("weight", weight, DType::kU8, ceil_div(elements, 2)));
    QLOAD_TRY(part("quant_map", weight + ".quant_map", DType::kF32, 16));
    if (s.nested_block == 0) {
      QLOAD_TRY(part("absmax", weight + ".absmax", DType::kF32, blocks));
    } else {
      QLOAD_TRY(part("absmax", weight + ".absmax", DType::kU8, blocks));
      QLOAD_TRY(part("nested_absmax", weight + ".nested_absmax", DType::kF32, ceil_div(blocks, s.nested_block)));
      QLOAD_TRY(part("nested_quant_map", weight + ".nested_quant_map", DType::kF32, 256));
    }
    t.parts.emplace_back("quant_state", static_cast<std::uint32_t>(&entry - catalog.tensors.data()));
    out.logical.push_back(std::move(t));
  }
  return {};
}

Status dequantize_bnb4(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                       std::uint64_t row_end, std::span<float> out) {
  const QuantParams& p = t.params;
  const std::uint64_t elements = t.rows * t.cols;
  if (p.group_size == 0 || t.rows > (std::uint64_t{1} << 31) || t.cols > (std::uint64_t{1} << 31))
    return fail(Error(Errc::kCorrupt, "bitsandbytes weight without a block size").with_tensor(t.name));
  const std::uint64_t blocks = ceil_div(elements, p.group_size);
  DequantArgs a;
  a.cols = t.cols;
  a.group_size = p.group_size;
  a.nested_block = p.nested_block;
  a.nested_offset = p.nested_offset;
  const auto take = [&](std::string_view role, DType dtype, std::uint64_t count) -> Result<const std::byte*> {
    QLOAD_ASSIGN_OR_RETURN(const PartBytes* part, find_part(t, parts, role));
    if (part->dtype != dtype || part->bytes.size() != count * dtype_info(dtype).block_bytes)
      return fail(
          Error(Errc::kCorrupt, fmt::format("bitsandbytes part '{}' is {} of {} bytes, expected {} {}", role,
                                            dtype_name(part->dtype), part->bytes.size(), count, dtype_name(dtype)))
              .with_tensor(t.name));
    return part->bytes.data();
  };
  QLOAD_ASSIGN_OR_RETURN(const std::byte* codes, take("weight", DType::kU8, ceil_div(elements, 2)));
  QLOAD_ASSIGN_OR_RETURN(const std::byte* map, take("quant_map", DType::kF32, 16));
  a.codes = reinterpret_cast<const std::uint8_t*>(codes);
  a.code_map = reinterpret_cast<const float*>(map);
  if (p.nested_block == 0) {
    QLOAD_ASSIGN_OR_RETURN(const std::byte* absmax, take("absmax", DType::kF32, blocks));
    a.absmax = reinterpret_cast<const float*>(absmax);
  } else {
    QLOAD_ASSIGN_OR_RETURN(const std::byte* absmax, take("absmax", DType::kU8, blocks));
    QLOAD_ASSIGN_OR_RETURN(const std::byte* nested,
                           take("nested_absmax", DType::kF32, ceil_div(blocks, p.nested_block)));
    QLOAD_ASSIGN_OR_RETURN(const std::byte* nested_map, take("nested_quant_map", DType::kF32, 256));
    a.scale_codes = reinterpret_cast<const std::uint8_t*>(absmax);
    a.nested_absmax = reinterpret_cast<const float*>(nested);
    a.nested_map = reinterpret_cast<const float*>(nested_map);
  }
  float* y = out.data();
  for (std::uint64_t n = row_begin; n < row_end; ++n)
    for (std::uint64_t k = 0; k < t.cols; ++k) *y++ = element::Bnb4::value(a, n, k);
  return {};
}

}  // namespace qload::formats::detail

namespace qload::formats::detail {

Status detect_bnb8(const Catalog& catalog, QuantizedCatalog& out) {
  constexpr std::string_view kScb = ".SCB";
  for (std::uint32_t i = 0; i < catalog.tensors.size(); ++i) {
    const TensorEntry& scb = catalog.tensors[i];
    if (!scb.name.ends_with(kScb)) continue;
    const std::string prefix = scb.name.substr(0, scb.name.size() - kScb.size());
    const std::string& path = catalog.files[scb.file].path;
    const TensorEntry* weight = catalog.find(prefix + ".weight");
    if (weight == nullptr || weight->dtype != DType::kI8 || weight->shape.rank() != 2)
      return fail(located(Errc::kCorrupt, "bitsandbytes SCB without an I8 [N, K] weight beside it", path, scb.name));
    const std::uint64_t n = weight->shape[0], k = weight->shape[1];
    if (scb.dtype != DType::kF32 || scb.shape != Shape{n})
      return fail(located(Errc::kCorrupt,
                          fmt::format("bitsandbytes SCB: expected F32 [{}], found {} {}", n, dtype_name(scb.dtype),
                                      scb.shape.to_string()),
                          path, scb.name, scb.offset));
    LogicalTensor t{.name = prefix + ".weight",
                    .params = {.scheme = QuantScheme::kBnb8,
                               .bits = 8,
                               .group_size = k,
                               .scale_layout = ScaleLayout::kRow,
                               .weight_dtype = DType::kI8,
                               .scale_dtype = DType::kF32},
                    .rows = n,
                    .cols = k};
    t.parts.emplace_back("weight", static_cast<std::uint32_t>(weight - catalog.tensors.data()));
    t.parts.emplace_back("SCB", i);
    if (const TensorEntry* format = catalog.find(prefix + ".weight_format")) {
      if (format->dtype != DType::kU8 || format->nbytes != 1)
        return fail(located(Errc::kCorrupt, "bitsandbytes weight_format is not a U8 scalar", path, format->name));
      t.parts.emplace_back("weight_format", static_cast<std::uint32_t>(format - catalog.tensors.data()));
    }
    out.logical.push_back(std::move(t));
  }
  return {};
}

Status dequantize_bnb8(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                       std::uint64_t row_end, std::span<float> out) {
  QLOAD_ASSIGN_OR_RETURN(const PartBytes* weight, find_part(t, parts, "weight"));
  QLOAD_ASSIGN_OR_RETURN(const PartBytes* scb, find_part(t, parts, "SCB"));
  // Checked: with K = 0 the weight is 0 bytes whatever N is, and N * 4 could wrap to the SCB's size.
  const auto weight_bytes = checked_mul(t.rows, t.cols), scb_bytes = checked_mul(t.rows, 4);
  if (weight->dtype != DType::kI8 || !weight_bytes || weight->bytes.size() != *weight_bytes ||
      scb->dtype != DType::kF32 || !scb_bytes || scb->bytes.size() != *scb_bytes)
    return fail(Error(Errc::kCorrupt, fmt::format("bitsandbytes 8-bit parts of {} and {} bytes for [{}, {}]",
                                                  weight->bytes.size(), scb->bytes.size(), t.rows, t.cols))
                    .with_tensor(t.name));
  if (const auto format = std::ranges::find(parts, std::string_view("weight_format"), &PartBytes::role);
      format != parts.end() && (format->bytes.size() != 1 || format->bytes[0] != std::byte{0}))
    return fail(Error(Errc::kUnsupported, "bitsandbytes weight_format other than 0 (row-major)").with_tensor(t.name));
  DequantArgs a;
  a.cols = t.cols;
  a.codes = reinterpret_cast<const std::uint8_t*>(weight->bytes.data());
  a.absmax = reinterpret_cast<const float*>(scb->bytes.data());
  float* y = out.data();
  for (std::uint64_t n = row_begin; n < row_end; ++n)
    for (std::uint64_t k = 0; k < t.cols; ++k) *y++ = element::Bnb8::value(a, n, k);
  return {};
}

}  // namespace qload::formats::detail

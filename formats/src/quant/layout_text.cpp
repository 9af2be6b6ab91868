// describe_layout (quant.hpp): a quantized weight's scale and zero-point layout in words.
#include <fmt/format.h>

#include "decoders.hpp"
#include "qload/formats/quant.hpp"

namespace qload::formats {
namespace {

std::string scale_text(const LogicalTensor& w) {
  const QuantParams& p = w.params;
  switch (p.scale_layout) {
    case ScaleLayout::kTensor: return "per-tensor";
    case ScaleLayout::kRow: return "per-channel";
    case ScaleLayout::kColumn: return "per-channel (per column of the weight stored transposed, [K, N])";
    case ScaleLayout::kBlock: return fmt::format("block {}x{}", p.block_rows, p.block_cols);
    case ScaleLayout::kGroup: break;
  }
  // A group as wide as the row is one scale per output channel.
  std::string text = p.group_size >= w.cols ? "per-channel" : fmt::format("per-group {}", p.group_size);
  // g_idx maps each column to its group: act-order when it is not k / group (the data says).
  if (w.part("g_idx") || w.part("weight_g_idx")) text += " (with g_idx)";
  return text;
}

}  // namespace

QuantLayoutText describe_layout(const LogicalTensor& w, const Catalog& catalog) {
  if (w.params.scheme == QuantScheme::kGgml) return detail::ggml_layout(w);
  if (w.params.scheme == QuantScheme::kMxfp4)
    return {.scales = "per-group 32", .scale_dtype = "E8M0", .zero_points = "none (symmetric)"};
  if (w.params.scheme == QuantScheme::kBnb8)
    return {.scales = "per-channel (SCB, the row's absmax; W = q * SCB / 127)",
            .scale_dtype = "F32",
            .zero_points = "none (symmetric)"};
  if (w.params.scheme == QuantScheme::kBnb4)
    return {.scales = w.params.nested_block == 0
                          ? fmt::format("per-block {} of the flattened weight (absmax)", w.params.group_size)
                          : fmt::format("per-block {} of the flattened weight (absmax, double-quantized: U8 codes, "
                                        "an F32 scale per {} blocks)",
                                        w.params.group_size, w.params.nested_block),
            .scale_dtype = w.params.nested_block == 0 ? "F32" : "U8",
            .zero_points = "none (a 16-entry code table)"};
  if (w.params.scheme == QuantScheme::kNvfp4)
    return {.scales = w.part("weight_scale_2") ? "per-group 16, times a per-tensor weight_scale_2 (F32)"
                                               : "per-group 16, divided by a per-tensor global scale (F32)",
            .scale_dtype = "F8_E4M3",
            .zero_points = "none (symmetric)"};
  QuantLayoutText out;
  out.scales = scale_text(w);
  for (const char* role : {"scales", "weight_scale_inv", "weight_scale"})
    if (const auto index = w.part(role)) {
      out.scale_dtype = std::string(dtype_name(catalog.tensors[*index].dtype));
      break;
    }
  const std::string per = out.scales.substr(0, out.scales.find(" ("));
  if (const auto qzeros = w.part("qzeros")) {
    const QuantParams& p = w.params;
    const bool awq = p.scheme == QuantScheme::kAwqGemm || p.scheme == QuantScheme::kAwqGemv;
    out.zero_points =
        fmt::format("{}, {}-bit packed along N in {}", per, p.bits, dtype_name(catalog.tensors[*qzeros].dtype));
    if (awq) out.zero_points += ", AWQ's interleaved order";
    if (p.scheme == QuantScheme::kGptq)
      out.zero_points += p.gptq_version == 2 ? ", stored as z (GPTQ v2)"
                         : p.gptq_v1_whole_word && gptq_v1_word_offset(p.bits) != 0
                             ? ", stored as z-1 by whole words (GPTQ v1, GPTQModel)"
                             : ", stored as z-1 per field (GPTQ v1)";
    if (p.sym) out.zero_points += "; symmetric, all 2^(bits-1)";
  } else if (const auto zp = w.part("weight_zero_point")) {
    const bool packed = w.params.scheme == QuantScheme::kCtPacked;
    out.zero_points =
        fmt::format("{}, {}{}", per, packed ? fmt::format("{}-bit packed along N in ", w.params.bits) : std::string(),
                    dtype_name(catalog.tensors[*zp].dtype));
  } else {
    out.zero_points = "none (symmetric)";
  }
  return out;
}

}  // namespace qload::formats

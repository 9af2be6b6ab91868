#include "decode_plan.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace qload::scheduler::detail {
namespace {

bool is_floating(DType d) {
  return d == DType::kF16 || d == DType::kBF16 || d == DType::kF32;
}

// "<prefix>.weight" -> "<prefix>.<suffix>".
std::string sibling_name(const std::string& weight_name, std::string_view suffix) {
  return weight_name.substr(0, weight_name.size() - std::string_view("weight").size()) + std::string(suffix);
}

}  // namespace

bool is_quantizable_weight(const formats::TensorEntry& t) {
  const std::string& n = t.name;
  return is_floating(t.dtype) && t.shape.rank() == 2 && n.ends_with(".weight") &&
         n.find("embed") == std::string::npos && n.find("norm") == std::string::npos &&
         n.find("lm_head") == std::string::npos;
}

std::vector<bool> quantized_parts(const formats::Catalog& catalog, const formats::QuantizedCatalog& quant) {
  std::vector<bool> out(catalog.tensors.size(), false);
  for (const formats::LogicalTensor& lt : quant.logical)
    for (const auto& [role, index] : lt.parts) out[index] = true;
  return out;
}

Result<std::vector<DecodeJob>> plan_decode_jobs(const formats::Catalog& catalog, const formats::QuantizedCatalog& quant,
                                                const PlanOptions& options) {
  std::vector<DecodeJob> jobs;
  if (options.dequantize) {
    const std::uint64_t elem = dtype_info(*options.dequantize).block_bytes;
    for (std::uint32_t l = 0; l < quant.logical.size(); ++l) {
      const formats::LogicalTensor& lt = quant.logical[l];
      // The name may be a part's (FP8 and int8 keep "weight"), never another tensor's.
      const bool own_part =
          std::ranges::any_of(lt.parts, [&](const auto& part) { return catalog.tensors[part.second].name == lt.name; });
      if (catalog.find(lt.name) != nullptr && !own_part)
        return fail(
            Error(Errc::kCorrupt, "the dequantized weight's name is already a stored tensor").with_tensor(lt.name));
      DecodeJob job{.kind = DecodeJob::Kind::kDequantize, .logical = l};
      for (const auto& [role, index] : lt.parts) job.inputs.push_back(index);
      auto elems = checked_mul(lt.rows, lt.cols);
      auto bytes = elems ? checked_mul(*elems, elem) : elems;
      if (!bytes) return fail(Error(Errc::kOverflow, "dequantized size exceeds 2^64").with_tensor(lt.name));
      job.outputs.push_back(DecodeOutput{
          .name = lt.name, .dtype = *options.dequantize, .shape = Shape{lt.rows, lt.cols}, .bytes = *bytes});
      jobs.push_back(std::move(job));
    }
  }
  if (options.quantize) {
    const std::vector<bool> parts = quantized_parts(catalog, quant);
    for (std::uint32_t i = 0; i < catalog.tensors.size(); ++i) {
      const formats::TensorEntry& t = catalog.tensors[i];
      if (parts[i] || !is_quantizable_weight(t)) continue;
      const std::uint64_t rows = t.shape[0];
      const std::uint64_t cols = t.shape[1];
      const formats::QuantizedLayout layout = formats::quantized_layout(rows, cols, *options.quantize);
      const std::string scale_name = sibling_name(t.name, layout.scale_suffix);
      if (catalog.find(scale_name) != nullptr)
        return fail(
            Error(Errc::kCorrupt, fmt::format("cannot quantize: '{}' already exists", scale_name)).with_tensor(t.name));
      DecodeJob job{.kind = DecodeJob::Kind::kQuantize, .input = i, .target = *options.quantize, .inputs = {i}};
      job.outputs.push_back(
          DecodeOutput{.name = t.name, .dtype = layout.weight_dtype, .shape = t.shape, .bytes = layout.weight_bytes});
      job.outputs.push_back(DecodeOutput{
          .name = scale_name, .dtype = DType::kF32, .shape = layout.scale_shape, .bytes = layout.scale_bytes});
      jobs.push_back(std::move(job));
    }
  }
  return jobs;
}

}  // namespace qload::scheduler::detail

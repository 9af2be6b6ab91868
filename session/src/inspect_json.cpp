#include <string>
#include <vector>

#include "qload/formats/quant.hpp"
#include "qload/session/inspect.hpp"

namespace qload::session {
namespace {

using nlohmann::json;

json shape_json(const Shape& shape) {
  return json(std::vector<std::uint64_t>(shape.dims().begin(), shape.dims().end()));
}

// A JSON text the checkpoint carries, parsed; null when absent, and kept as the string it is
// when it does not parse (inspect reports what is there, it does not judge it).
json embedded_json(const std::string& text) {
  if (text.empty()) return nullptr;
  json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return parsed.is_discarded() ? json(text) : parsed;
}

// The detected scheme of each quantized weight; null when there is none.
json quant_json(const formats::QuantizedCatalog& q, const formats::Catalog& c) {
  if (q.method.empty()) return nullptr;
  json logical = json::array();
  for (const formats::LogicalTensor& lt : q.logical) {
    json parts = json::object();
    for (const auto& [role, index] : lt.parts) parts[role] = c.tensors[index].name;
    const formats::QuantLayoutText layout = formats::describe_layout(lt, c);
    logical.push_back({{"name", lt.name},
                       {"scheme", formats::weight_scheme_name(lt.params)},
                       {"bits", lt.params.bits},
                       {"group_size", lt.params.group_size},
                       {"symmetric", lt.params.sym},
                       {"scales", layout.scales},
                       {"scale_dtype", layout.scale_dtype},
                       {"zero_points", layout.zero_points},
                       {"shape", shape_json(lt.dequantized_shape())},
                       {"parts", parts}});
  }
  return {{"method", q.method}, {"config_source", q.config_source}, {"logical_tensors", logical}};
}

}  // namespace

json inspection_json(const Inspection& inspection) {
  const formats::Catalog& c = inspection.catalog;
  json files = json::array();
  for (const formats::CatalogFile& f : c.files)
    files.push_back({{"path", f.path}, {"size", f.size}, {"data_offset", f.data_offset}, {"metadata", f.metadata}});
  json tensors = json::array();
  for (const formats::TensorEntry& t : c.tensors) {
    tensors.push_back({{"name", t.name},
                       {"dtype", std::string(dtype_name(t.dtype))},
                       {"shape", shape_json(t.shape)},
                       {"nbytes", t.nbytes},
                       {"file", c.files[t.file].path},
                       {"offset", t.offset}});
    if (!t.strides.empty()) tensors.back()["strides"] = t.strides;
  }
  return {{"schema", std::string(kInspectSchema)},
          {"format", c.format},
          {"source", c.source},
          {"tensor_count", c.tensors.size()},
          {"tensor_bytes", c.total_tensor_bytes()},
          {"files", files},
          {"tensors", tensors},
          {"config", embedded_json(c.config_json)},
          {"quantization_config", embedded_json(c.quantization_config)},
          {"quantization", quant_json(inspection.quant, c)}};
}

}  // namespace qload::session

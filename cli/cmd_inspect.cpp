// `qload inspect PATH [--json]`: what a checkpoint holds, without reading tensor data.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "qload/runtime/units.hpp"
#include "qload/session/inspect.hpp"

namespace qload::cli {
namespace {

using nlohmann::json;

json shape_json(const Shape& shape) {
  return json(std::vector<std::uint64_t>(shape.dims().begin(), shape.dims().end()));
}

// The detected scheme of each quantized weight; null when there is none. A detection error
// is reported, not hidden: inspect exists to say what is wrong with a checkpoint.
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
                       {"sym", lt.params.sym},
                       {"scales", layout.scales},
                       {"scale_dtype", layout.scale_dtype},
                       {"zero_points", layout.zero_points},
                       {"shape", shape_json(lt.dequantized_shape())},
                       {"parts", parts}});
  }
  return {{"method", q.method}, {"config_source", q.config_source}, {"logical_tensors", logical}};
}

json to_json(const formats::Catalog& c, const formats::QuantizedCatalog& q) {
  json files = json::array();
  for (const auto& f : c.files)
    files.push_back({{"path", f.path}, {"bytes", f.size}, {"data_offset", f.data_offset}, {"metadata", f.metadata}});
  json tensors = json::array();
  for (const auto& t : c.tensors) {
    tensors.push_back({{"name", t.name},
                       {"dtype", std::string(dtype_name(t.dtype))},
                       {"shape", shape_json(t.shape)},
                       {"bytes", t.nbytes},
                       {"file", t.file},
                       {"offset", t.offset}});
    if (!t.strides.empty()) tensors.back()["strides"] = t.strides;  // a strided view (bytes: its span)
  }
  json quant = c.quantization_config.empty() ? json(nullptr) : json::parse(c.quantization_config, nullptr, false);
  return {{"schema", "qload.inspect/1"},
          {"format", c.format},
          {"source", c.source},
          {"files", files},
          {"tensors", tensors},
          {"tensor_count", c.tensors.size()},
          {"total_bytes", c.total_tensor_bytes()},
          {"has_config", !c.config_json.empty()},
          {"quantization_config", quant},
          {"quantization", quant_json(q, c)}};
}

void print_text(const formats::Catalog& c, const formats::QuantizedCatalog& q) {
  fmt::print("format: {}\nsource: {}\n", c.format, escape_for_terminal(c.source));
  fmt::print("files: {}\n", c.files.size());
  for (std::size_t i = 0; i < c.files.size(); ++i)
    fmt::print("  [{}] {}  {} ({} tensor bytes from offset {})\n", i, escape_for_terminal(c.files[i].path),
               format_bytes(c.files[i].size), format_bytes(c.files[i].size - c.files[i].data_offset),
               c.files[i].data_offset);
  fmt::print("tensors: {}, {} in all\n", c.tensors.size(), format_bytes(c.total_tensor_bytes()));
  fmt::print("  {:<48} {:<8} {:<20} {:>12} {:>4} {:>12}\n", "name", "dtype", "shape", "bytes", "file", "offset");
  for (const auto& t : c.tensors)
    fmt::print("  {:<48} {:<8} {:<20} {:>12} {:>4} {:>12}{}\n", escape_for_terminal(t.name), dtype_name(t.dtype),
               t.shape.to_string(), t.nbytes, t.file, t.offset,
               t.strides.empty() ? "" : fmt::format("  strides ({})", fmt::join(t.strides, ", ")));
  for (const auto& f : c.files)
    for (const auto& [k, v] : f.metadata)
      fmt::print("metadata: {} = {}\n", escape_for_terminal(k), escape_for_terminal(v));
  fmt::print("quantization: {}\n",
             c.quantization_config.empty() ? "none declared" : escape_for_terminal(c.quantization_config));
  if (q.method.empty()) return;
  fmt::print("quantized weights: {} ({}, from {})\n", q.logical.size(), q.method, q.config_source);
  for (const formats::LogicalTensor& lt : q.logical) {
    const formats::QuantLayoutText layout = formats::describe_layout(lt, c);
    fmt::print("  {:<48} {:<10} {}-bit {} in {} parts; scales {} {}; zero points {}\n", escape_for_terminal(lt.name),
               formats::weight_scheme_name(lt.params), lt.params.bits, lt.dequantized_shape().to_string(),
               lt.parts.size(), layout.scale_dtype, layout.scales, layout.zero_points);
  }
}

}  // namespace

int run_inspect(const InspectArgs& args) {
  auto inspection = session::inspect(args.path);
  if (!inspection) return report(inspection.error());
  if (args.json)
    fmt::print("{}\n",
               to_json(inspection->catalog, inspection->quant).dump(2, ' ', false, json::error_handler_t::replace));
  else
    print_text(inspection->catalog, inspection->quant);
  return 0;
}

}  // namespace qload::cli

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
    fmt::print("{}\n", session::inspection_json(*inspection).dump(2, ' ', false, json::error_handler_t::replace));
  else
    print_text(inspection->catalog, inspection->quant);
  return 0;
}

}  // namespace qload::cli

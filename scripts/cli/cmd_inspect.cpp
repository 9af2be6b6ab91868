// `qload inspect PATH [--json]`: what a checkpoint holds, without reading tensor data.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "qload/formats/driver.hpp"
#include "qload/runtime/units.hpp"

namespace qload::cli {
namespace {

using nlohmann::json;

json shape_json(const Shape& shape) {
  return json(std::vector<std::uint64_t>(shape.dims().begin(), shape.dims().end()));
}

json to_json(const formats::Catalog& c) {
  json files = json::array();
  for (const auto& f : c.files)
    files.push_back({{"path", f.path}, {"bytes", f.size}, {"data_offset", f.data_offset}, {"metadata", f.metadata}});
  json tensors = json::array();
  for (const auto& t : c.tensors)
    tensors.push_back({{"name", t.name},
                       {"dtype", std::string(dtype_name(t.dtype))},
                       {"shape", shape_json(t.shape)},
                       {"bytes", t.nbytes},
                       {"file", t.file},
                       {"offset", t.offset}});
  json quant = c.quantization_config.empty() ? json(nullptr) : json::parse(c.quantization_config, nullptr, false);
  return {{"schema", "qload.inspect/1"},
          {"format", c.format},
          {"source", c.source},
          {"files", files},
          {"tensors", tensors},
          {"tensor_count", c.tensors.size()},
          {"total_bytes", c.total_tensor_bytes()},
          {"has_config", !c.config_json.empty()},
          {"quantization_config", quant}};
}

void print_text(const formats::Catalog& c) {
  fmt::print("format: {}\nsource: {}\n", c.format, escape_for_terminal(c.source));
  fmt::print("files: {}\n", c.files.size());
  for (std::size_t i = 0; i < c.files.size(); ++i)
    fmt::print("  [{}] {}  {} ({} tensor bytes from offset {})\n", i, escape_for_terminal(c.files[i].path),
               format_bytes(c.files[i].size), format_bytes(c.files[i].size - c.files[i].data_offset),
               c.files[i].data_offset);
  fmt::print("tensors: {}, {} in all\n", c.tensors.size(), format_bytes(c.total_tensor_bytes()));
  fmt::print("  {:<48} {:<8} {:<20} {:>12} {:>4} {:>12}\n", "name", "dtype", "shape", "bytes", "file", "offset");
  for (const auto& t : c.tensors)
    fmt::print("  {:<48} {:<8} {:<20} {:>12} {:>4} {:>12}\n", escape_for_terminal(t.name), dtype_name(t.dtype),
               t.shape.to_string(), t.nbytes, t.file, t.offset);
  for (const auto& f : c.files)
    for (const auto& [k, v] : f.metadata)
      fmt::print("metadata: {} = {}\n", escape_for_terminal(k), escape_for_terminal(v));
  fmt::print("quantization: {}\n",
             c.quantization_config.empty() ? "none declared" : escape_for_terminal(c.quantization_config));
}

}  // namespace

int run_inspect(const InspectArgs& args) {
  auto catalog = formats::open_catalog(args.path);
  if (!catalog) return report(catalog.error());
  if (args.json)
    fmt::print("{}\n", to_json(*catalog).dump(2, ' ', false, json::error_handler_t::replace));
  else
    print_text(*catalog);
  return 0;
}

}  // namespace qload::cli

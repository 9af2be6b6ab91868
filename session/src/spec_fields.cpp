#include "qload/session/spec_fields.hpp"

#include <fmt/format.h>
#include <algorithm>

namespace qload::session {
namespace {

// `field`'s name for `client` ("" where the client does not take it).
std::string name_of(std::string_view field, SpecClient client) {
  const auto* row = std::ranges::find_if(kSpecFields, [&](const SpecField& f) { return f.field == field; });
  if (row == kSpecFields.end()) return std::string(field);
  switch (client) {
    case SpecClient::kCli: return std::string(row->cli);
    case SpecClient::kC: return row->c.empty() ? std::string() : fmt::format("qload_options.{}", row->c);
    case SpecClient::kPython: return std::string(row->python);
  }
  return std::string(field);
}

}  // namespace

SpecNames spec_names(SpecClient client) {
  const auto name = [&](std::string_view field) { return name_of(field, client); };
  return {.devices = name("devices"),
          .placement = name("placement"),
          .dtype = name("dtype"),
          .dequantize = name("dequantize"),
          .tensor_parallel = name("tensor_parallel"),
          .pipeline_parallel = name("pipeline_parallel"),
          .data_parallel = name("data_parallel"),
          .share_reads = name("share_reads"),
          .lock = name("lock"),
          .recipe = name("recipe")};
}

std::string spec_fields_markdown() {
  const auto cell = [](std::string_view name) { return name.empty() ? std::string("-") : fmt::format("`{}`", name); };
  std::string out = "| field | `qload load` | C | Python | what |\n|---|---|---|---|---|\n";
  for (const SpecField& f : kSpecFields)
    out += fmt::format("| `{}` | {} | {} | {} | {} |\n", f.field, cell(f.cli), cell(f.c), cell(f.python), f.what);
  return out;
}

}  // namespace qload::session

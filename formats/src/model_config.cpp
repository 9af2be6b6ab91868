#include "qload/formats/model_config.hpp"

#include <fmt/format.h>

#include "qload/formats/strict_json.hpp"

namespace qload::formats {

Result<ModelGeometry> read_geometry(const Catalog& catalog) {
  ModelGeometry g;
  if (catalog.config_json.empty()) return g;
  QLOAD_ASSIGN_OR_RETURN(const nlohmann::json config, parse_strict_json_object(catalog.config_json, "config.json"));
  const auto read = [&](const char* key, std::optional<std::uint64_t>& out) -> Status {
    const auto it = config.find(key);
    if (it == config.end() || it->is_null()) return {};
    if (!it->is_number_unsigned() || it->get<std::uint64_t>() == 0)
      return fail(Error(Errc::kCorrupt, fmt::format("'{}' must be a positive integer, not {}", key, it->dump()))
                      .with_file("config.json"));
    out = it->get<std::uint64_t>();
    return {};
  };
  QLOAD_TRY(read("num_hidden_layers", g.layers));
  QLOAD_TRY(read("hidden_size", g.hidden));
  QLOAD_TRY(read("num_attention_heads", g.heads));
  QLOAD_TRY(read("num_key_value_heads", g.kv_heads));
  QLOAD_TRY(read("head_dim", g.head_dim));
  if (!g.kv_heads) g.kv_heads = g.heads;
  if (!g.head_dim && g.hidden && g.heads && *g.hidden % *g.heads == 0) g.head_dim = *g.hidden / *g.heads;
  return g;
}

}  // namespace qload::formats

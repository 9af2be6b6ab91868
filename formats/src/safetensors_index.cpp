#include "qload/formats/safetensors_index.hpp"

#include <cmath>
#include <string_view>

#include <fmt/format.h>

#include "located_error.hpp"
#include "path_guard.hpp"
#include "qload/formats/strict_json.hpp"

namespace qload::formats {
namespace {

using Json = nlohmann::json;

Result<std::optional<std::uint64_t>> parse_total_size(const Json& root, const std::string& path) {
  const auto metadata = root.find("metadata");
  if (metadata == root.end() || metadata->is_null()) return std::optional<std::uint64_t>{};
  if (!metadata->is_object()) return fail(located(Errc::kCorrupt, "index metadata is not an object", path));
  const auto total = metadata->find("total_size");
  if (total == metadata->end()) return std::optional<std::uint64_t>{};
  if (total->is_number_unsigned()) return std::optional<std::uint64_t>{total->get<std::uint64_t>()};
  // Some writers emit an integral float (1234.0); accept it while it is exact in a double.
  if (total->is_number_float()) {
    const double value = total->get<double>();
    if (value >= 0 && value <= 9007199254740992.0 && std::floor(value) == value)
      return std::optional<std::uint64_t>{static_cast<std::uint64_t>(value)};
  }
  return fail(located(Errc::kCorrupt,
                      fmt::format("index metadata.total_size must be a non-negative integer (found {})",
                                  total->dump(-1, ' ', true, Json::error_handler_t::replace)),
                      path));
}

}  // namespace

Result<SafetensorsIndex> parse_safetensors_index(std::span<const std::byte> json, const std::string& path) {
  if (json.size() > kMaxIndexBytes)
    return fail(located(Errc::kUnsupported,
                        fmt::format("index is {} bytes; qload reads at most {}", json.size(), kMaxIndexBytes), path));
  const std::string_view text(reinterpret_cast<const char*>(json.data()), json.size());
  QLOAD_ASSIGN_OR_RETURN(const Json root, parse_strict_json_object(text, path));
  SafetensorsIndex index;
  QLOAD_ASSIGN_OR_RETURN(index.total_size, parse_total_size(root, path));
  const auto map = root.find("weight_map");
  if (map == root.end()) return fail(located(Errc::kCorrupt, "index has no weight_map", path));
  if (!map->is_object()) return fail(located(Errc::kCorrupt, "index weight_map is not an object", path));
  for (const auto& [tensor, shard] : map->items()) {
    if (!shard.is_string())
      return fail(located(Errc::kCorrupt, "weight_map value must be a shard file name (a string)", path, tensor));
    const auto& name = shard.get_ref<const std::string&>();
    QLOAD_TRY(check_relative_name(name, path, tensor));
    index.weight_map.emplace(tensor, name);
  }
  return index;
}

}  // namespace qload::formats

// Reading quantization configs: typed accessors over the strict JSON reader's objects (every
// wrong type is kCorrupt naming the file and the key), and the per-method parsers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "detect.hpp"
#include "qload/runtime/error.hpp"

namespace qload::formats::detail {

using Json = nlohmann::json;

// Where a value sits, for messages: the file and the dotted path of the enclosing object.
struct JsonPlace {
  const std::string& path;
  std::string where;  // "quantization_config", "quantization_config.config_groups.group_0.weights"
  std::string key(std::string_view name) const;
};

Error config_error(Errc code, std::string message, const std::string& path);

std::string lower_ascii(std::string_view text);
// A value as JSON text for messages, cut to a short length and terminal-safe.
std::string short_dump(const Json& value);

// Optional fields: missing and null read as nullopt / empty.
Result<std::optional<std::int64_t>> get_int(const Json& object, const char* key, const JsonPlace& place);
Result<std::optional<bool>> get_bool(const Json& object, const char* key, const JsonPlace& place);
Result<std::optional<std::string>> get_string(const Json& object, const char* key, const JsonPlace& place);
Result<const Json*> get_object(const Json& object, const char* key, const JsonPlace& place);
Result<std::vector<std::string>> get_string_list(const Json& object, const char* key, const JsonPlace& place);
// A block shape: [rows, cols] of positive integers below 2^30, or the older "RxC" string.
Result<std::optional<std::pair<std::uint32_t, std::uint32_t>>> get_block(const Json& object, const char* key,
                                                                         const JsonPlace& place);
// A list of module patterns of `kind` (at most kMaxPatterns), counted against the config's
// `tally` (detect.hpp: the caps hold for all of a config's lists together).
Result<std::vector<ModulePattern>> get_patterns(const Json& object, const char* key, ModulePattern::Kind kind,
                                                const JsonPlace& place, PatternTally& tally);

// One config object whose method is known. `method` is lower-case ("gptq", "awq", "fp8",
// "fbgemm_fp8", "modelopt", "compressed-tensors"); others are kUnsupported.
Result<QuantConfig> parse_method_config(const Json& config, const std::string& method, const JsonPlace& place);
Result<QuantConfig> parse_compressed_tensors(const Json& config, const JsonPlace& place);

}  // namespace qload::formats::detail

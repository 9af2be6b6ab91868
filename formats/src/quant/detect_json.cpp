// Typed accessors for quantization configs (detect_config.hpp). A key that is missing or null
// reads as absent; any other type than the one expected is kCorrupt naming the file and key.
#include <cctype>
#include <cstdio>
#include <limits>

#include <fmt/format.h>

#include "detect_config.hpp"
#include "located_error.hpp"

namespace qload::formats::detail {
namespace {

const Json* find_value(const Json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

Error wrong_type(const Json& value, const char* key, const JsonPlace& place, std::string_view expected) {
  return config_error(Errc::kCorrupt, fmt::format("{} is {}, expected {}", place.key(key), value.type_name(), expected),
                      place.path);
}

}  // namespace

std::string JsonPlace::key(std::string_view name) const {
  return where.empty() ? std::string(name) : where + "." + std::string(name);
}

Error config_error(Errc code, std::string message, const std::string& path) {
  return located(code, std::move(message), path);
}

std::string short_dump(const Json& value) {
  constexpr std::size_t kMax = 120;
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > kMax) text = text.substr(0, kMax) + "...";
  return escape_for_terminal(text);
}

std::string lower_ascii(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

Result<std::optional<std::int64_t>> get_int(const Json& object, const char* key, const JsonPlace& place) {
  const Json* value = find_value(object, key);
  if (value == nullptr) return std::nullopt;
  if (value->is_number_unsigned()) {
    const auto v = value->get<std::uint64_t>();
    if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      return fail(config_error(Errc::kCorrupt, fmt::format("{} is {}, out of range", place.key(key), v), place.path));
    return static_cast<std::int64_t>(v);
  }
  if (value->is_number_integer()) return value->get<std::int64_t>();
  return fail(wrong_type(*value, key, place, "an integer"));
}

Result<std::optional<bool>> get_bool(const Json& object, const char* key, const JsonPlace& place) {
  const Json* value = find_value(object, key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_boolean()) return fail(wrong_type(*value, key, place, "true or false"));
  return value->get<bool>();
}

Result<std::optional<std::string>> get_string(const Json& object, const char* key, const JsonPlace& place) {
  const Json* value = find_value(object, key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_string()) return fail(wrong_type(*value, key, place, "a string"));
  return value->get<std::string>();
}

Result<const Json*> get_object(const Json& object, const char* key, const JsonPlace& place) {
  const Json* value = find_value(object, key);
  if (value != nullptr && !value->is_object()) return fail(wrong_type(*value, key, place, "an object"));
  return value;
}

Result<std::vector<std::string>> get_string_list(const Json& object, const char* key, const JsonPlace& place) {
  std::vector<std::string> out;
  const Json* value = find_value(object, key);
  if (value == nullptr) return out;
  if (!value->is_array()) return fail(wrong_type(*value, key, place, "a list of strings"));
  if (value->size() > kMaxPatterns)
    return fail(config_error(
        Errc::kUnsupported,
        fmt::format("{} has {} entries; qload reads at most {}", place.key(key), value->size(), kMaxPatterns),
        place.path));
  for (const Json& item : *value) {
    if (!item.is_string()) return fail(wrong_type(item, key, place, "a list of strings"));
    out.push_back(item.get<std::string>());
  }
  return out;
}

Result<std::optional<std::pair<std::uint32_t, std::uint32_t>>> get_block(const Json& object, const char* key,
                                                                         const JsonPlace& place) {
  using Block = std::pair<std::uint32_t, std::uint32_t>;
  const Json* value = find_value(object, key);
  if (value == nullptr) return std::nullopt;
  constexpr std::uint64_t kMax = std::uint64_t{1} << 30;
  const auto valid = [&](std::uint64_t v) { return v > 0 && v < kMax; };
  if (value->is_array() && value->size() == 2 && (*value)[0].is_number_unsigned() && (*value)[1].is_number_unsigned()) {
    const auto rows = (*value)[0].get<std::uint64_t>();
    const auto cols = (*value)[1].get<std::uint64_t>();
    if (valid(rows) && valid(cols)) return Block{static_cast<std::uint32_t>(rows), static_cast<std::uint32_t>(cols)};
  }
  if (value->is_string()) {
    const std::string& text = value->get_ref<const std::string&>();
    unsigned long long rows = 0;
    unsigned long long cols = 0;
    char tail = 0;
    if (text.size() < 32 && std::sscanf(text.c_str(), "%llux%llu%c", &rows, &cols, &tail) == 2 && valid(rows) &&
        valid(cols))
      return Block{static_cast<std::uint32_t>(rows), static_cast<std::uint32_t>(cols)};
  }
  return fail(config_error(
      Errc::kCorrupt,
      fmt::format("{} is {}, expected [rows, cols] of positive integers", place.key(key), short_dump(*value)),
      place.path));
}

Result<std::vector<ModulePattern>> get_patterns(const Json& object, const char* key, ModulePattern::Kind kind,
                                                const JsonPlace& place, PatternTally& tally) {
  QLOAD_ASSIGN_OR_RETURN(std::vector<std::string> texts, get_string_list(object, key, place));
  std::vector<ModulePattern> out;
  out.reserve(texts.size());
  for (std::string& text : texts) {
    QLOAD_ASSIGN_OR_RETURN(ModulePattern pattern,
                           make_pattern(kind, std::move(text), place.path, place.key(key), tally));
    out.push_back(std::move(pattern));
  }
  return out;
}

}  // namespace qload::formats::detail

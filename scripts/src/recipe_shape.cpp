// The shape of a qload.recipe{...} table, checked at the call site: its keys, their types, and
// the rule lists' (recipe_shape.hpp).
#include "recipe_shape.hpp"

#include <algorithm>
#include <array>
#include <initializer_list>
#include <lua.hpp>
#include <string_view>

#include <fmt/format.h>

#include "qload/runtime/spelling.hpp"

namespace qload::scripts {
namespace {

constexpr std::array<std::string_view, 11> kRecipeKeys{"source", "devices",  "placement", "dtype",  "quant", "parallel",
                                                       "io",     "settings", "verify",    "report", "trace"};
constexpr std::array<std::string_view, 5> kIoKeys{"engine", "queue_depth", "direct", "chunk", "staging"};
constexpr std::array<std::string_view, 5> kParallelKeys{"tensor", "pipeline", "data", "rules", "share_reads"};
constexpr std::array<std::string_view, 3> kSplitRuleKeys{"match", "pattern", "split"};
constexpr std::array<std::string_view, 7> kRuleKeys{"match",      "pattern",  "keep",  "skip",
                                                    "dequantize", "quantize", "repack"};
template <std::size_t N>
std::string unknown_key_message(std::string_view key, std::string_view where,
                                const std::array<std::string_view, N>& known) {
  std::string message = fmt::format("unknown key '{}' in {}", key, where);
  for (std::string_view k : known)
    if (edit_distance(key, k) <= 2) return message + fmt::format(" (did you mean '{}'?)", k);
  return message + fmt::format(" (known keys: {})", fmt::join(known, ", "));
}

// Checks every key of the table at `index` against `known`; a message on the first
// unknown or non-string key.
template <std::size_t N>
std::string check_keys(lua_State* L, int index, std::string_view where, const std::array<std::string_view, N>& known,
                       std::string& blamed) {
  lua_pushnil(L);
  while (lua_next(L, index) != 0) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING) {
      lua_pop(L, 1);
      return fmt::format("{} has a key that is not a name", where);
    }
    const std::string_view key = lua_tostring(L, -1);
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      std::string message = unknown_key_message(key, where, known);
      blamed = key;
      lua_pop(L, 1);
      return message;
    }
  }
  return {};
}

// "" when the field is absent or of one of the `types`, else a message naming key and type.
std::string expect_type(lua_State* L, int table, const char* key, std::initializer_list<int> types,
                        std::string_view what, std::string& blamed) {
  lua_getfield(L, table, key);
  const int actual = lua_type(L, -1);
  lua_pop(L, 1);
  if (actual == LUA_TNIL || std::find(types.begin(), types.end(), actual) != types.end()) return {};
  blamed = key;
  return fmt::format("'{}' must be {}, not a {}", key, what, lua_typename(L, actual));
}

// A rule list's shape: a list of tables with the keys `keys` (strings, or booleans where
// `flags` names them), each naming its tensors by exactly one of match (glob) and pattern (Lua
// pattern). `name` is how messages call the list ("quant", "parallel.rules").
template <std::size_t N>
std::string check_rules(lua_State* L, int rules, const char* name, const std::array<std::string_view, N>& keys,
                        std::initializer_list<const char*> flags, std::string& blamed) {
  const auto count = static_cast<int>(lua_objlen(L, rules));
  int pairs = 0;
  lua_pushnil(L);
  while (lua_next(L, rules) != 0) {
    lua_pop(L, 1);
    ++pairs;
  }
  blamed = name;
  if (pairs != count) return fmt::format("'{}' must be a list of rules {{ match = ..., ... }}", name);
  for (int i = 1; i <= count; ++i) {
    lua_rawgeti(L, rules, i);
    const int rule = lua_gettop(L);
    std::string message;
    const std::string where = fmt::format("{}[{}]", name, i);
    if (lua_type(L, rule) != LUA_TTABLE) message = fmt::format("{} must be a table", where);
    if (message.empty()) message = check_keys(L, rule, where, keys, blamed);
    for (std::string_view key : keys) {
      if (!message.empty()) break;
      const std::string k(key);
      const bool flag =
          std::find_if(flags.begin(), flags.end(), [&](const char* f) { return key == f; }) != flags.end();
      message = flag ? expect_type(L, rule, k.c_str(), {LUA_TBOOLEAN}, "true or false", blamed)
                     : expect_type(L, rule, k.c_str(), {LUA_TSTRING}, "a string", blamed);
    }
    if (message.empty()) {
      lua_getfield(L, rule, "match");
      lua_getfield(L, rule, "pattern");
      const int named = !lua_isnil(L, -2) + !lua_isnil(L, -1);
      lua_pop(L, 2);
      if (named != 1)
        message = fmt::format("{} needs exactly one of 'match' (a glob) and 'pattern' (a Lua pattern)", where);
    }
    for (const char* key : {"match", "pattern"}) {
      if (!message.empty()) break;
      lua_getfield(L, rule, key);
      std::size_t length = 0;
      const char* text = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &length) : nullptr;
      // An empty name matches nothing and a NUL would cut the glob short: both are mistakes.
      if (text != nullptr && (length == 0 || std::string_view(text, length).find('\0') != std::string_view::npos))
        message = fmt::format("{}.{} must be a non-empty string without NUL bytes", where, key);
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
    if (!message.empty()) return message;
  }
  return {};
}

}  // namespace

std::string check_recipe_shape(lua_State* L, bool source_given, std::string& blamed) {
  if (lua_type(L, 1) != LUA_TTABLE) return "qload.recipe expects a table: qload.recipe { source = ... }";
  if (std::string m = check_keys(L, 1, "qload.recipe", kRecipeKeys, blamed); !m.empty()) return m;
  lua_getfield(L, 1, "source");
  const int source_type = lua_type(L, -1);
  lua_pop(L, 1);
  if (source_type != LUA_TSTRING && !(source_given && source_type == LUA_TNIL))
    return "qload.recipe needs 'source', a path string or a Hugging Face model id";
  const std::pair<const char*, std::string> checks[] = {
      {"devices",
       expect_type(L, 1, "devices", {LUA_TSTRING, LUA_TTABLE}, "a string like \"cpu\" or a list of them", blamed)},
      {"placement", expect_type(L, 1, "placement", {LUA_TSTRING, LUA_TFUNCTION}, "a string or a function", blamed)},
      {"dtype", expect_type(L, 1, "dtype", {LUA_TSTRING}, "a string", blamed)},
      {"quant", expect_type(L, 1, "quant", {LUA_TTABLE, LUA_TFUNCTION}, "a list of rules or a function", blamed)},
      {"parallel", expect_type(L, 1, "parallel", {LUA_TTABLE}, "a table", blamed)},
      {"io", expect_type(L, 1, "io", {LUA_TTABLE}, "a table", blamed)},
      {"settings", expect_type(L, 1, "settings", {LUA_TTABLE}, "a table of settings (docs/settings.md)", blamed)},
      {"verify", expect_type(L, 1, "verify", {LUA_TSTRING}, "a lockfile path", blamed)},
      {"trace", expect_type(L, 1, "trace", {LUA_TSTRING}, "a file path", blamed)},
      {"report", expect_type(L, 1, "report", {LUA_TSTRING}, "\"text\" or \"json\"", blamed)},
  };
  for (const auto& [key, message] : checks)
    if (!message.empty()) return message;
  std::string message;
  lua_getfield(L, 1, "io");
  if (lua_type(L, -1) == LUA_TTABLE) {
    const int io = lua_gettop(L);
    message = check_keys(L, io, "io", kIoKeys, blamed);
    if (message.empty()) message = expect_type(L, io, "queue_depth", {LUA_TNUMBER}, "a number", blamed);
    for (const char* key : {"engine", "direct"})
      if (message.empty()) message = expect_type(L, io, key, {LUA_TSTRING}, "a string", blamed);
  }
  lua_pop(L, 1);
  if (!message.empty()) return message;
  lua_getfield(L, 1, "parallel");
  if (lua_type(L, -1) == LUA_TTABLE) {
    const int parallel = lua_gettop(L);
    message = check_keys(L, parallel, "parallel", kParallelKeys, blamed);
    for (const char* key : {"tensor", "pipeline", "data"})
      if (message.empty()) message = expect_type(L, parallel, key, {LUA_TNUMBER}, "a number", blamed);
    if (message.empty()) message = expect_type(L, parallel, "rules", {LUA_TTABLE}, "a list of rules", blamed);
    if (message.empty()) message = expect_type(L, parallel, "share_reads", {LUA_TBOOLEAN}, "true or false", blamed);
    lua_getfield(L, parallel, "rules");
    if (message.empty() && lua_type(L, -1) == LUA_TTABLE)
      message = check_rules(L, lua_gettop(L), "parallel.rules", kSplitRuleKeys, {}, blamed);
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  if (!message.empty()) return message;
  lua_getfield(L, 1, "quant");
  if (lua_type(L, -1) == LUA_TTABLE)
    message = check_rules(L, lua_gettop(L), "quant", kRuleKeys, {"keep", "skip", "repack"}, blamed);
  lua_pop(L, 1);
  return message;
}

}  // namespace qload::scripts

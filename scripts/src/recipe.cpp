#include "qload/scripts/recipe.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <lua.hpp>
#include <string_view>

#include <fmt/format.h>

#include "qload/runtime/units.hpp"

namespace qload::scripts {
namespace {

constexpr std::array<std::string_view, 3> kRecipeKeys{"source", "devices", "io"};
constexpr std::array<std::string_view, 5> kIoKeys{"engine", "queue_depth", "direct", "chunk", "staging"};
const char kRecipeMark = 0;     // registry key (its address): metatable marking qload.recipe tables
const char kRecipeContext = 0;  // registry key (its address): the RecipeContext of this parse

// What qload.recipe tells parse_recipe about a failed validation. `return qload.recipe{...}`
// is a tail call, which erases the caller's frame, so Lua cannot say which line failed;
// parse_recipe finds it in the text from the offending key instead.
struct RecipeContext {
  bool failed = false;
  std::string key;  // the offending key, if one is to blame
};

RecipeContext* context_of(lua_State* L) {
  lua_pushlightuserdata(L, const_cast<char*>(&kRecipeContext));
  lua_rawget(L, LUA_REGISTRYINDEX);
  auto* ctx = static_cast<RecipeContext*>(lua_touserdata(L, -1));
  lua_pop(L, 1);
  return ctx;
}

// 1-based line of the first occurrence of `word` (as a whole word) in `text`, or 0.
int line_of(std::string_view text, std::string_view word) {
  if (word.empty()) return 0;
  const auto is_name = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (std::size_t at = text.find(word); at != std::string_view::npos; at = text.find(word, at + 1)) {
    const bool starts = at == 0 || !is_name(text[at - 1]);
    const bool ends = at + word.size() == text.size() || !is_name(text[at + word.size()]);
    if (starts && ends)
      return 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(at), '\n'));
  }
  return 0;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

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
std::string check_keys(lua_State* L, int index, std::string_view where, const std::array<std::string_view, N>& known) {
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
      context_of(L)->key = key;
      lua_pop(L, 1);
      return message;
    }
  }
  return {};
}

std::string expect_type(lua_State* L, int table, const char* key, int type, std::string_view what) {
  lua_getfield(L, table, key);
  const int actual = lua_type(L, -1);
  lua_pop(L, 1);
  if (actual == LUA_TNIL || actual == type) return {};
  context_of(L)->key = key;
  return fmt::format("'{}' must be {}, not a {}", key, what, lua_typename(L, actual));
}

// Validates the shape of the recipe table (argument 1). Returns an error text or "".
std::string validate(lua_State* L) {
  if (lua_type(L, 1) != LUA_TTABLE) return "qload.recipe expects a table: qload.recipe { source = ... }";
  if (std::string m = check_keys(L, 1, "qload.recipe", kRecipeKeys); !m.empty()) return m;
  lua_getfield(L, 1, "source");
  const bool has_source = lua_type(L, -1) == LUA_TSTRING;
  lua_pop(L, 1);
  if (!has_source) return "qload.recipe needs 'source', a path string";
  lua_getfield(L, 1, "devices");
  const int devices = lua_type(L, -1);
  lua_pop(L, 1);
  if (devices != LUA_TNIL && devices != LUA_TSTRING && devices != LUA_TTABLE)
    return "'devices' must be a string like \"cpu\" or a list of them";
  if (std::string m = expect_type(L, 1, "io", LUA_TTABLE, "a table"); !m.empty()) return m;
  lua_getfield(L, 1, "io");
  std::string message;
  if (lua_type(L, -1) == LUA_TTABLE) {
    const int io = lua_gettop(L);
    message = check_keys(L, io, "io", kIoKeys);
    if (message.empty()) message = expect_type(L, io, "queue_depth", LUA_TNUMBER, "a number");
    for (const char* key : {"engine", "direct"})
      if (message.empty()) message = expect_type(L, io, key, LUA_TSTRING, "a string");
  }
  lua_pop(L, 1);
  return message;
}

// qload.recipe{...}: validates at the call site (so errors carry the recipe's file:line)
// and marks the table as a recipe.
int l_recipe(lua_State* L) {
  char message[512] = {};
  {
    const std::string text = validate(L);
    std::snprintf(message, sizeof message, "%s", text.c_str());
  }  // no C++ object may be alive when luaL_error unwinds
  if (message[0] != '\0') {
    context_of(L)->failed = true;
    lua_pushstring(L, message);
    return lua_error(L);
  }
  lua_settop(L, 1);
  lua_pushlightuserdata(L, const_cast<char*>(&kRecipeMark));
  lua_rawget(L, LUA_REGISTRYINDEX);
  lua_setmetatable(L, 1);
  return 1;
}

void install_qload_table(lua_State* L) {
  lua_pushlightuserdata(L, const_cast<char*>(&kRecipeMark));
  lua_newtable(L);
  lua_rawset(L, LUA_REGISTRYINDEX);
  lua_newtable(L);
  lua_pushcfunction(L, l_recipe);
  lua_setfield(L, -2, "recipe");
  lua_setglobal(L, "qload");
}

bool is_recipe(lua_State* L, int index) {
  if (!lua_getmetatable(L, index)) return false;
  lua_pushlightuserdata(L, const_cast<char*>(&kRecipeMark));
  lua_rawget(L, LUA_REGISTRYINDEX);
  const bool same = lua_rawequal(L, -1, -2) != 0;
  lua_pop(L, 2);
  return same;
}

std::optional<std::string> string_field(lua_State* L, int table, const char* key) {
  lua_getfield(L, table, key);
  std::optional<std::string> out;
  if (lua_type(L, -1) == LUA_TSTRING) out = lua_tostring(L, -1);
  lua_pop(L, 1);
  return out;
}

Result<std::vector<std::string>> read_devices(lua_State* L, const std::string& path) {
  lua_getfield(L, -1, "devices");
  std::vector<std::string> devices;
  if (lua_type(L, -1) == LUA_TSTRING) devices.emplace_back(lua_tostring(L, -1));
  if (lua_type(L, -1) == LUA_TTABLE) {
    for (int i = 1;; ++i) {
      lua_rawgeti(L, -1, i);
      if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        break;
      }
      const bool ok = lua_type(L, -1) == LUA_TSTRING;
      if (ok) devices.emplace_back(lua_tostring(L, -1));
      lua_pop(L, 1);
      if (!ok) {
        lua_pop(L, 1);
        return fail(Error(Errc::kInvalidArgument, fmt::format("devices[{}] must be a string", i)).with_file(path));
      }
    }
  }
  lua_pop(L, 1);
  if (devices.empty()) devices.emplace_back("cpu");
  return devices;
}

Result<RecipeIo> read_io(lua_State* L, const std::string& path) {
  RecipeIo io;
  lua_getfield(L, -1, "io");
  if (lua_type(L, -1) == LUA_TTABLE) {
    const int t = lua_gettop(L);
    io.engine = string_field(L, t, "engine");
    io.direct = string_field(L, t, "direct");
    lua_getfield(L, t, "queue_depth");
    if (lua_type(L, -1) == LUA_TNUMBER) {
      const double depth = lua_tonumber(L, -1);
      if (depth < 1 || depth > 4096 || depth != static_cast<double>(static_cast<std::uint32_t>(depth))) {
        lua_pop(L, 2);
        return fail(Error(Errc::kInvalidArgument, "io.queue_depth must be a whole number in 1..4096").with_file(path));
      }
      io.queue_depth = static_cast<std::uint32_t>(depth);
    }
    lua_pop(L, 1);
    for (auto [key, out] : {std::pair{"chunk", &io.chunk_bytes}, std::pair{"staging", &io.staging_bytes}}) {
      lua_getfield(L, t, key);
      std::string text = lua_type(L, -1) == LUA_TNUMBER || lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
      const bool present = !lua_isnil(L, -1);
      lua_pop(L, 1);
      if (!present) continue;
      auto bytes = parse_byte_size(text);
      if (!bytes) {
        lua_pop(L, 1);
        return fail(std::move(bytes.error()).with_note(fmt::format("io.{}", key)).with_file(path));
      }
      *out = *bytes;
    }
  }
  lua_pop(L, 1);
  return io;
}

}  // namespace

Result<Recipe> parse_recipe(const std::string& text, const std::string& path, const SandboxLimits& limits) {
  QLOAD_ASSIGN_OR_RETURN(LuaState state, LuaState::create(limits));
  lua_State* L = state.get();
  install_qload_table(L);
  RecipeContext context;
  lua_pushlightuserdata(L, const_cast<char*>(&kRecipeContext));
  lua_pushlightuserdata(L, &context);
  lua_rawset(L, LUA_REGISTRYINDEX);
  if (Status ran = state.run(text, path, 1); !ran) {
    if (!context.failed) return fail(std::move(ran.error()));
    int line = line_of(text, context.key);
    if (line == 0) line = line_of(text, "recipe");
    return fail(
        Error(Errc::kInvalidArgument, fmt::format("{}:{}: {}", path, line, ran.error().message())).with_file(path));
  }
  if (!is_recipe(L, -1))
    return fail(Error(Errc::kInvalidArgument, "a recipe must end with: return qload.recipe { ... }").with_file(path));
  Recipe recipe;
  recipe.path = path;
  const std::string source = string_field(L, lua_gettop(L), "source").value_or("");
  const std::filesystem::path base = std::filesystem::path(path).parent_path();
  recipe.source = std::filesystem::path(source).is_absolute() || base.empty() ? source : (base / source).string();
  QLOAD_ASSIGN_OR_RETURN(recipe.devices, read_devices(L, path));
  QLOAD_ASSIGN_OR_RETURN(recipe.io, read_io(L, path));
  return recipe;
}

Result<Recipe> load_recipe(const std::string& path, const SandboxLimits& limits) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(Error::from_errno(errno, "open recipe").with_file(path));
  constexpr std::size_t kMaxRecipeBytes = 1 << 20;
  std::string text(kMaxRecipeBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > kMaxRecipeBytes)
    return fail(Error(Errc::kInvalidArgument, "recipe is larger than 1 MiB").with_file(path));
  return parse_recipe(text, path, limits);
}

}  // namespace qload::scripts

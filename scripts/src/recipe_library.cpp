#include "recipe_library.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <lua.hpp>
#include <string_view>

#include "lua_syntax_error.hpp"
#include "qload/runtime/units.hpp"

namespace qload::scripts::detail {
namespace {

const char kContextKey = 0;  // registry key (its address): the RequireContext, or nil
const char kLoadedKey = 0;   // registry key (its address): name -> module value (false while loading)

// The library, in Lua. `qload.glob` and the "qload.*" modules; `qload.size` is C (it shares
// the byte-size parser with the CLI and the environment variables).
constexpr std::string_view kGlobChunk = R"lua(
local qload = ...
-- The anchored Lua pattern of a glob: * any run of characters, ? one; all else literal.
function qload.glob(glob)
  assert(type(glob) == "string", "qload.glob expects a string")
  local escaped = glob:gsub("[%^%$%(%)%%%.%[%]%+%-]", "%%%0")
  local pattern = escaped:gsub("%*", ".*"):gsub("%?", ".")
  return "^" .. pattern .. "$"
end
)lua";

struct LibraryModule {
  std::string_view name;
  std::string_view text;
};

constexpr std::string_view kPresets = R"lua(
-- qload.presets: name patterns and quant rules for common model families.
local presets = {}

-- Globs for the tensors of llama-style checkpoints (Llama, Mistral, Qwen2, ...).
presets.llama = {
  attention  = "*.self_attn.*_proj.weight",
  mlp        = "*.mlp.*_proj.weight",
  embeddings = "*embed_tokens*",
  lm_head    = "lm_head.*",
  norms      = "*norm*",
}

-- Rules that quantize a llama's attention and MLP projections on load to `target`
-- ("fp8:block" unless given: "fp8", "fp8:per-tensor", "fp8:per-channel", "int8"), and leave
-- embeddings, norms and lm_head as stored.
function presets.llama_quantize(target)
  target = target or "fp8:block"
  local p = presets.llama
  return {
    { match = p.lm_head,    skip = true },
    { match = p.embeddings, skip = true },
    { match = p.attention,  quantize = target },
    { match = p.mlp,        quantize = target },
  }
end

-- One rule that dequantizes every quantized weight to `dtype` ("bf16" unless given).
function presets.dequantize_all(dtype)
  return { { match = "*", dequantize = dtype or "bf16" } }
end

return presets
)lua";

constexpr LibraryModule kLibrary[] = {{"qload.presets", kPresets}};

RequireContext* context_of(lua_State* L) {
  lua_pushlightuserdata(L, const_cast<char*>(&kContextKey));
  lua_rawget(L, LUA_REGISTRYINDEX);
  auto* ctx = static_cast<RequireContext*>(lua_touserdata(L, -1));
  lua_pop(L, 1);
  return ctx;
}

// qload.size("8MiB") -> 8388608 (a number; "8MiB" / "1.5 GiB" / 4096 as parse_byte_size reads them).
int l_size(lua_State* L) {
  char message[256] = {};
  lua_Number bytes = 0;
  {
    const char* text = lua_tostring(L, 1);
    const Result<std::uint64_t> parsed = text != nullptr
                                             ? parse_byte_size(text)
                                             : fail(Errc::kInvalidArgument, "qload.size expects a size like \"8MiB\"");
    if (parsed)
      bytes = static_cast<lua_Number>(*parsed);
    else
      std::snprintf(message, sizeof message, "qload.size: %s", parsed.error().message().c_str());
  }  // no C++ object may be alive when luaL_error unwinds
  if (message[0] != '\0') return luaL_error(L, "%s", message);
  lua_pushnumber(L, bytes);
  return 1;
}

// Dotted identifiers: [A-Za-z_][A-Za-z0-9_]* joined by single dots, at most 200 bytes.
bool valid_module_name(std::string_view name) {
  const auto letter = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; };
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  if (name.empty() || name.size() > 200) return false;
  bool part_start = true;
  for (const char c : name) {
    if (c == '.') {
      if (part_start) return false;  // an empty part: a leading dot or two dots in a row
      part_start = true;
    } else if (letter(c) || (!part_start && digit(c))) {
      part_start = false;
    } else {
      return false;
    }
  }
  return !part_start;  // not ending in a dot
}

// Finds and reads the module `name`: qload's library, or <recipe dir>/<name with dots as
// slashes>.lua, which must stay inside the recipe's folder once symlinks are resolved.
// Returns an error text, or "" with `text` and `chunk_name` set.
std::string read_module(RequireContext* ctx, std::string_view name, std::string& text, std::string& chunk_name) {
  for (const LibraryModule& m : kLibrary)
    if (m.name == name) {
      text = m.text;
      chunk_name = "@qload/" + std::string(name) + ".lua";
      return {};
    }
  if (name.starts_with("qload.")) return "require: qload's library has no module '" + std::string(name) + "'";
  if (!valid_module_name(name))
    return "require: '" + std::string(name) + "' is not a module name (letters, digits, _ and dots only)";
  if (ctx == nullptr) return "require is only available while the recipe itself runs, not in plan-time hooks";
  std::string relative(name);
  std::replace(relative.begin(), relative.end(), '.', '/');
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::canonical(ctx->recipe_dir, ec);
  if (ec) return "require: cannot resolve the recipe's folder: " + ec.message();
  const std::filesystem::path path = std::filesystem::weakly_canonical(dir / (relative + ".lua"), ec);
  const std::string inside = dir.string() + "/";
  if (ec || !path.string().starts_with(inside))
    return "require: module '" + std::string(name) + "' resolves outside the recipe's folder";
  std::ifstream in(path, std::ios::binary);
  if (!in) return "require: no module '" + std::string(name) + "' (looked for " + path.string() + ")";
  constexpr std::size_t kMaxModuleBytes = 1 << 20;
  text.assign(kMaxModuleBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > kMaxModuleBytes) return "require: module '" + std::string(name) + "' is larger than 1 MiB";
  if (!text.empty() && text[0] == '\x1b') return "require: module '" + std::string(name) + "' is precompiled bytecode";
  chunk_name = "@" + path.string();
  ctx->modules.push_back({std::string(name), path.string(), text});
  return {};
}

// require(name): the module's value, loaded once per recipe.
int l_require(lua_State* L) {
  size_t length = 0;
  const char* raw = luaL_checklstring(L, 1, &length);
  lua_pushlightuserdata(L, const_cast<char*>(&kLoadedKey));
  lua_rawget(L, LUA_REGISTRYINDEX);
  const int loaded = lua_gettop(L);
  lua_pushvalue(L, 1);
  lua_rawget(L, loaded);
  if (lua_toboolean(L, -1)) return 1;
  if (!lua_isnil(L, -1)) return luaL_error(L, "require: '%s' requires itself (a cycle)", raw);
  lua_pop(L, 1);
  int status = 0;
  {
    std::string text, chunk_name;
    const std::string error = read_module(context_of(L), std::string_view(raw, length), text, chunk_name);
    if (!error.empty()) {
      lua_pushlstring(L, error.data(), error.size());
      status = LUA_ERRRUN;
    } else {
      status = luaL_loadbuffer(L, text.data(), text.size(), chunk_name.c_str());
      // The module's own bytes are not shown (lua_syntax_error.hpp).
      if (status == LUA_ERRSYNTAX) {
        const char* raw_message = lua_tostring(L, -1);  // always a string here; guarded all the same
        const std::string message = without_quoted_token(raw_message != nullptr ? raw_message : "syntax error");
        lua_pop(L, 1);
        lua_pushlstring(L, message.data(), message.size());
      }
    }
  }  // no C++ object may be alive when lua_error unwinds
  if (status != 0) return lua_error(L);
  lua_pushvalue(L, 1);
  lua_pushboolean(L, 0);  // loading: a second require of it is a cycle
  lua_rawset(L, loaded);
  lua_call(L, 0, 1);  // inside the recipe's protected call: an error unwinds to it
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_pushboolean(L, 1);
  }
  lua_pushvalue(L, 1);
  lua_pushvalue(L, -2);
  lua_rawset(L, loaded);
  return 1;
}

}  // namespace

Status install_recipe_library(LuaState& state, RequireContext* context) {
  lua_State* L = state.get();
  lua_pushlightuserdata(L, const_cast<char*>(&kContextKey));
  lua_pushlightuserdata(L, context);
  lua_rawset(L, LUA_REGISTRYINDEX);
  lua_pushlightuserdata(L, const_cast<char*>(&kLoadedKey));
  lua_newtable(L);
  lua_rawset(L, LUA_REGISTRYINDEX);
  lua_pushcfunction(L, l_require);
  lua_setglobal(L, "require");
  lua_getglobal(L, "qload");
  lua_pushcfunction(L, l_size);
  lua_setfield(L, -2, "size");
  lua_pop(L, 1);
  if (luaL_loadbuffer(L, kGlobChunk.data(), kGlobChunk.size(), "@qload/glob.lua") != 0) {
    lua_pop(L, 1);
    return fail(Errc::kInternal, "qload's recipe library does not compile");
  }
  lua_getglobal(L, "qload");
  return state.call(1, 0, "qload/glob.lua");
}

void uninstall_require(LuaState& state) {
  lua_State* L = state.get();
  lua_pushlightuserdata(L, const_cast<char*>(&kContextKey));
  lua_pushnil(L);
  lua_rawset(L, LUA_REGISTRYINDEX);
}

}  // namespace qload::scripts::detail

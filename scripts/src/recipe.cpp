// Recipe evaluation: the sandboxed chunk runs once; qload.recipe{...} checks the table's shape
// at the call site (keys, types); then its data is read out here and checked for meaning
// (device names, dtypes, rule actions), every error naming the recipe file and line.
#include "qload/scripts/recipe.hpp"

#include <glob.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <lua.hpp>
#include <string_view>

#include <fmt/format.h>

#include "qload/formats/hub_cache.hpp"
#include "qload/io/digest.hpp"
#include "qload/runtime/cuda.hpp"
#include "qload/runtime/device.hpp"
#include "qload/runtime/settings.hpp"
#include "qload/runtime/units.hpp"
#include "recipe_hooks.hpp"
#include "recipe_library.hpp"
#include "recipe_shape.hpp"

namespace qload::scripts {
namespace {

const char kRecipeMark = 0;     // registry key (its address): metatable marking qload.recipe tables
const char kRecipeContext = 0;  // registry key (its address): the RecipeContext of this parse

// What qload.recipe tells parse_recipe about a failed validation. `return qload.recipe{...}`
// is a tail call, which erases the caller's frame, so Lua cannot say which line failed;
// parse_recipe finds it in the text from the offending key instead.
struct RecipeContext {
  bool failed = false;
  std::string key;            // the offending key, if one is to blame
  bool source_given = false;  // applied to a checkpoint the caller names: `source` is optional
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
    const bool starts = at == 0 || !is_name(text[at - 1]) || !is_name(word.front());
    const bool ends = at + word.size() == text.size() || !is_name(text[at + word.size()]) || !is_name(word.back());
    if (starts && ends)
      return 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(at), '\n'));
  }
  return 0;
}

// qload.recipe{...}: validates at the call site (so errors carry the recipe's file:line)
// and marks the table as a recipe.
int l_recipe(lua_State* L) {
  // A hook calling qload.recipe at plan time: the parse (and its context) is over.
  if (context_of(L) == nullptr) return luaL_error(L, "qload.recipe may be called only while the recipe file runs");
  char message[512] = {};
  {
    RecipeContext* context = context_of(L);
    const std::string text = check_recipe_shape(L, context->source_given, context->key);
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
  // string.find as it was before the recipe ran, for pattern rules at plan time.
  lua_getglobal(L, "string");
  lua_getfield(L, -1, "find");
  lua_setfield(L, LUA_REGISTRYINDEX, "qload.string_find");
  lua_pop(L, 1);
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

// An error about the recipe at `line` (0: no line known).
Error recipe_error(const std::string& path, int line, Errc code, std::string message) {
  const std::string where = line > 0 ? fmt::format("{}:{}: ", path, line) : fmt::format("{}: ", path);
  return Error(code, where + message).with_file(path);
}

// A path from the recipe, relative to the recipe's folder unless absolute.
std::string resolve(const std::filesystem::path& base, const std::string& p) {
  return std::filesystem::path(p).is_absolute() || base.empty() ? p : (base / p).string();
}

// A source may be a glob naming exactly one directory, file or index.
Result<std::string> resolve_source(const std::string& path, int line, const std::string& source) {
  if (source.find_first_of("*?[") == std::string::npos) return source;
  glob_t matches{};
  const int rc = ::glob(source.c_str(), 0, nullptr, &matches);
  std::vector<std::string> found;
  for (std::size_t i = 0; rc == 0 && i < matches.gl_pathc; ++i) found.emplace_back(matches.gl_pathv[i]);
  ::globfree(&matches);
  if (found.size() != 1)
    return fail(recipe_error(
        path, line, Errc::kNotFound,
        fmt::format("source '{}' matches {} paths; a source is one directory, file or index", source, found.size())));
  return found.front();
}

// The recipe's `source`: a path relative to the recipe's folder (or a glob naming one) when that
// exists; otherwise a Hugging Face model id's snapshot in the local cache (hub_cache.hpp), found
// here so that the recipe's folder, not the working directory, is where a path of that name
// wins. An id not in the cache stays an id: the load says what is missing (a recipe is also read
// for its settings alone, `qload config`, which needs no model). Anything else is the path.
Result<std::string> recipe_source(const std::filesystem::path& base, const std::string& path, int line,
                                  const std::string& given) {
  const std::string joined = resolve(base, given);
  std::error_code ec;
  const std::optional<formats::HubId> id = formats::parse_hub_id(given);
  if (!id || std::filesystem::exists(std::filesystem::symlink_status(joined, ec)))
    return resolve_source(path, line, joined);
  Result<std::string> snapshot =
      formats::resolve_hub_id(*id, formats::hub_cache_dir([](const char* name) { return std::getenv(name); }));
  return snapshot ? *snapshot : given;
}

Result<std::vector<std::string>> read_devices(lua_State* L, int recipe, const std::string& path, int line) {
  lua_getfield(L, recipe, "devices");
  std::vector<std::string> given;
  if (lua_type(L, -1) == LUA_TSTRING) given.emplace_back(lua_tostring(L, -1));
  if (lua_type(L, -1) == LUA_TTABLE) {
    for (int i = 1;; ++i) {
      lua_rawgeti(L, -1, i);
      if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        break;
      }
      const bool ok = lua_type(L, -1) == LUA_TSTRING;
      if (ok) given.emplace_back(lua_tostring(L, -1));
      lua_pop(L, 1);
      if (!ok) {
        lua_pop(L, 1);
        return fail(recipe_error(path, line, Errc::kInvalidArgument, fmt::format("devices[{}] must be a string", i)));
      }
    }
  }
  lua_pop(L, 1);
  if (given.empty()) given.emplace_back("cpu");
  std::vector<std::string> devices;
  for (const std::string& d : given) {
    if (d == "cuda:*") {  // every GPU this machine has
      const CudaInfo info = probe_cuda();
      if (info.devices.empty())
        return fail(recipe_error(path, line, Errc::kUnsupported,
                                 fmt::format("devices 'cuda:*': no GPU visible ({})", info.unavailable_reason)));
      for (const CudaDevice& gpu : info.devices) devices.push_back(fmt::format("cuda:{}", gpu.index));
      continue;
    }
    auto parsed = parse_device(d);
    if (!parsed) return fail(recipe_error(path, line, Errc::kInvalidArgument, parsed.error().message()));
    devices.push_back(parsed->to_string());
  }
  auto list = parse_device_list(fmt::format("{}", fmt::join(devices, ",")));
  if (!list) return fail(recipe_error(path, line, Errc::kInvalidArgument, list.error().message()));
  return devices;
}

// The value at the top of the stack as a setting's text: strings as written, numbers as Lua
// prints them, booleans as true/false; nullopt for any other type.
std::optional<std::string> setting_text(lua_State* L) {
  switch (lua_type(L, -1)) {
    case LUA_TSTRING: return std::string(lua_tostring(L, -1));
    case LUA_TNUMBER: {
      lua_pushvalue(L, -1);  // lua_tostring converts in place: convert a copy
      std::string text = lua_tostring(L, -1);
      lua_pop(L, 1);
      return text;
    }
    case LUA_TBOOLEAN: return std::string(lua_toboolean(L, -1) ? "true" : "false");
    default: return std::nullopt;
  }
}

// The recipe's settings: its `io` table (older spellings, by each setting's recipe key) and its
// `settings` table (by name), each parsed by the settings table so a bad value fails here,
// naming the file, line and key. A setting given twice is an error.
Result<std::vector<RecipeSetting>> read_settings(lua_State* L, int recipe, const std::string& path,
                                                 std::string_view text) {
  std::vector<RecipeSetting> out;
  const auto error = [&](std::string_view key, Errc code, std::string message) {
    return fail(recipe_error(path, line_of(text, key), code, std::move(message)));
  };
  const auto add = [&](const SettingSpec& spec, std::string key, std::string value) -> Status {
    for (const RecipeSetting& s : out)
      if (s.name == spec.name)
        return error(spec.name, Errc::kInvalidArgument, fmt::format("{} and {} both set {}", s.key, key, spec.name));
    ResolvedSettings check;
    if (Status s = check.set(spec.name, value, SettingSource::kRecipe, key); !s)
      return error(key.substr(key.find('.') + 1), s.error().code(), s.error().message());
    out.push_back(RecipeSetting{.name = std::string(spec.name), .text = std::move(value), .key = std::move(key)});
    return {};
  };
  for (const char* table : {"io", "settings"}) {
    lua_getfield(L, recipe, table);
    if (lua_type(L, -1) != LUA_TTABLE) {
      lua_pop(L, 1);
      continue;
    }
    const int t = lua_gettop(L);
    const bool io = std::string_view(table) == "io";
    lua_pushnil(L);
    while (lua_next(L, t) != 0) {
      const std::string key = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "";
      const std::optional<std::string> value = setting_text(L);
      lua_pop(L, 1);
      const std::string written = fmt::format("{}.{}", table, key);
      const SettingSpec* spec = nullptr;
      for (const SettingSpec& candidate : setting_table())
        if (io ? candidate.recipe_key == written : candidate.name == key) spec = &candidate;
      Status status;
      if (spec == nullptr) {
        const std::string suggestion = setting_suggestion(key);
        status = error(key, Errc::kInvalidArgument,
                       fmt::format("{} is not a setting{}", written,
                                   suggestion.empty() ? "" : fmt::format(" (did you mean {}?)", suggestion)));
      } else if (!value) {
        status = error(key, Errc::kInvalidArgument, fmt::format("{} must be a string, number or boolean", written));
      } else {
        status = add(*spec, written, *value);
      }
      if (!status) {
        lua_pop(L, 2);  // key, table
        return fail(std::move(status.error()));
      }
    }
    lua_pop(L, 1);
  }
  // In the table's order, so that the recipe's hash-independent view of them is deterministic.
  std::ranges::sort(out, {}, [](const RecipeSetting& s) { return find_setting(s.name) - setting_table().data(); });
  return out;
}

Result<RecipeParallel> read_parallel(lua_State* L, int recipe, const std::string& path, int line) {
  RecipeParallel parallel;
  lua_getfield(L, recipe, "parallel");
  if (lua_type(L, -1) == LUA_TTABLE) {
    for (auto [key, out] : {std::pair{"tensor", &parallel.tensor}, std::pair{"pipeline", &parallel.pipeline},
                            std::pair{"data", &parallel.data}}) {
      lua_getfield(L, -1, key);
      const bool present = lua_type(L, -1) == LUA_TNUMBER;
      const double v = present ? lua_tonumber(L, -1) : 1;
      lua_pop(L, 1);
      if (v < 1 || v > 4096 || v != std::floor(v)) {
        lua_pop(L, 1);
        return fail(recipe_error(path, line, Errc::kInvalidArgument,
                                 fmt::format("parallel.{} must be a whole number in 1..4096", key)));
      }
      *out = static_cast<std::uint32_t>(v);
    }
    lua_getfield(L, -1, "share_reads");
    parallel.share_reads = lua_toboolean(L, -1) != 0;
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return parallel;
}

// parallel.rules: which split each matching tensor takes over the tensor ranks.
Result<std::vector<SplitRule>> read_split_rules(lua_State* L, int recipe, const std::string& path,
                                                std::string_view text) {
  std::vector<SplitRule> rules;
  lua_getfield(L, recipe, "parallel");
  if (lua_type(L, -1) == LUA_TTABLE) {
    lua_getfield(L, -1, "rules");
    if (lua_type(L, -1) == LUA_TTABLE) {
      const int table = lua_gettop(L);
      const auto count = static_cast<int>(lua_objlen(L, table));
      for (int i = 1; i <= count; ++i) {
        lua_rawgeti(L, table, i);
        const int rule = lua_gettop(L);
        SplitRule r;
        r.glob = string_field(L, rule, "match").value_or("");
        r.pattern = string_field(L, rule, "pattern").value_or("");
        r.line = line_of(text, r.glob.empty() ? r.pattern : r.glob);
        const std::optional<std::string> split = string_field(L, rule, "split");
        lua_pop(L, 1);
        auto parsed = split ? scheduler::parse_split(*split)
                            : Result<scheduler::Split>(fail(Errc::kInvalidArgument, "a split rule needs 'split'"));
        if (!parsed) {
          lua_pop(L, 2);
          return fail(recipe_error(path, r.line, Errc::kInvalidArgument,
                                   fmt::format("parallel.rules[{}]: {}", i, parsed.error().message())));
        }
        r.split = *parsed;
        rules.push_back(std::move(r));
      }
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return rules;
}

Result<DType> read_dtype(const std::string& path, int line, const std::string& text) {
  if (text == "bf16" || text == "bfloat16") return DType::kBF16;
  if (text == "f16" || text == "float16") return DType::kF16;
  if (text == "f32" || text == "float32") return DType::kF32;
  return fail(
      recipe_error(path, line, Errc::kInvalidArgument, fmt::format("dtype '{}' is not bf16, f16 or f32", text)));
}

// The static quant rules (their shape was checked by qload.recipe; here their actions).
Result<std::vector<QuantRule>> read_rules(lua_State* L, int recipe, const std::string& path, std::string_view text) {
  std::vector<QuantRule> rules;
  lua_getfield(L, recipe, "quant");
  if (lua_type(L, -1) == LUA_TTABLE) {
    const int table = lua_gettop(L);
    const auto count = static_cast<int>(lua_objlen(L, table));
    for (int i = 1; i <= count; ++i) {
      lua_rawgeti(L, table, i);
      QuantRule rule;
      rule.glob = string_field(L, lua_gettop(L), "match").value_or("");
      rule.pattern = string_field(L, lua_gettop(L), "pattern").value_or("");
      rule.line = line_of(text, rule.glob.empty() ? rule.pattern : rule.glob);
      auto policy = detail::read_rule_action(L, -1, fmt::format("quant[{}]", i));
      lua_pop(L, 1);
      if (!policy) {
        lua_pop(L, 1);
        return fail(recipe_error(path, rule.line, Errc::kInvalidArgument, policy.error().message()));
      }
      rule.policy = *policy;
      rules.push_back(std::move(rule));
    }
  }
  lua_pop(L, 1);
  return rules;
}

// A registry reference to the function in field `key` of the recipe, or LUA_NOREF.
int function_ref(lua_State* L, int recipe, const char* key) {
  lua_getfield(L, recipe, key);
  if (lua_type(L, -1) != LUA_TFUNCTION) {
    lua_pop(L, 1);
    return LUA_NOREF;
  }
  return luaL_ref(L, LUA_REGISTRYINDEX);
}

std::uint64_t recipe_hash(const std::string& text, const std::vector<detail::RequiredModule>& modules) {
  std::string all = text;
  for (const detail::RequiredModule& m : modules) {
    all += '\0';
    all += m.name;
    all += '\0';
    all += m.text;
  }
  return io::xxh3_64(std::as_bytes(std::span(all)));
}

}  // namespace

Result<Recipe> parse_recipe(const std::string& text, const std::string& path, const SandboxLimits& limits,
                            const std::optional<std::string>& applied_to) {
  QLOAD_ASSIGN_OR_RETURN(LuaState state, LuaState::create(limits));
  lua_State* L = state.get();
  install_qload_table(L);
  RecipeContext context{.source_given = applied_to.has_value()};
  lua_pushlightuserdata(L, const_cast<char*>(&kRecipeContext));
  lua_pushlightuserdata(L, &context);
  lua_rawset(L, LUA_REGISTRYINDEX);
  const std::filesystem::path base = std::filesystem::path(path).parent_path();
  detail::RequireContext modules{.recipe_dir = base.empty() ? std::filesystem::path(".") : base, .modules = {}};
  QLOAD_TRY(detail::install_recipe_library(state, &modules));
  const Status ran = state.run(text, path, 1);
  detail::uninstall_require(state);
  lua_pushlightuserdata(L, const_cast<char*>(&kRecipeContext));
  lua_pushnil(L);
  lua_rawset(L, LUA_REGISTRYINDEX);
  if (!ran) {
    if (!context.failed) return fail(ran.error());
    int line = line_of(text, context.key);
    if (line == 0) line = line_of(text, "recipe");
    return fail(recipe_error(path, line, Errc::kInvalidArgument, ran.error().message()));
  }
  if (!is_recipe(L, -1))
    return fail(Error(Errc::kInvalidArgument, "a recipe must end with: return qload.recipe { ... }").with_file(path));
  const int t = lua_gettop(L);
  const auto line = [&](std::string_view key) { return line_of(text, key); };

  Recipe recipe;
  recipe.path = path;
  if (applied_to) {
    recipe.source = *applied_to;  // the caller's checkpoint; the recipe's own source, if any, is a default
  } else {
    QLOAD_ASSIGN_OR_RETURN(recipe.source,
                           recipe_source(base, path, line("source"), string_field(L, t, "source").value_or("")));
  }
  QLOAD_ASSIGN_OR_RETURN(recipe.devices, read_devices(L, t, path, line("devices")));
  if (const auto p = string_field(L, t, "placement")) {
    if (auto parsed = scheduler::parse_placement(*p); !parsed)
      return fail(recipe_error(path, line("placement"), Errc::kInvalidArgument, parsed.error().message()));
    recipe.placement = *p;
  }
  if (const auto d = string_field(L, t, "dtype")) {
    QLOAD_ASSIGN_OR_RETURN(recipe.dtype, read_dtype(path, line("dtype"), *d));
  }
  QLOAD_ASSIGN_OR_RETURN(recipe.quant, read_rules(L, t, path, text));
  QLOAD_ASSIGN_OR_RETURN(recipe.parallel, read_parallel(L, t, path, line("parallel")));
  QLOAD_ASSIGN_OR_RETURN(recipe.split_rules, read_split_rules(L, t, path, text));
  QLOAD_ASSIGN_OR_RETURN(recipe.settings, read_settings(L, t, path, text));
  if (const auto v = string_field(L, t, "verify")) recipe.verify = resolve(base, *v);
  if (const auto tr = string_field(L, t, "trace")) {
    // A recipe may come from anyone: what it writes stays under its own folder. Writing
    // elsewhere takes the user's own --trace.
    const std::filesystem::path p(*tr);
    if (tr->empty() || p.is_absolute() || std::ranges::any_of(p, [](const auto& part) { return part == ".."; }))
      return fail(recipe_error(path, line("trace"), Errc::kInvalidArgument,
                               fmt::format("trace '{}' must be a relative path inside the recipe's folder "
                                           "(pass --trace to write elsewhere)",
                                           *tr)));
    recipe.trace = resolve(base, *tr);
  }
  if (const auto rep = string_field(L, t, "report")) {
    if (*rep != "text" && *rep != "json")
      return fail(recipe_error(path, line("report"), Errc::kInvalidArgument,
                               fmt::format("report '{}' is not \"text\" or \"json\"", *rep)));
    recipe.json_report = *rep == "json";
  }
  for (const detail::RequiredModule& m : modules.modules) recipe.modules.push_back(m.path);
  recipe.hash = recipe_hash(text, modules.modules);

  const int place_ref = function_ref(L, t, "placement");
  const int quant_ref = function_ref(L, t, "quant");
  const bool patterns = std::ranges::any_of(recipe.quant, [](const QuantRule& r) { return !r.pattern.empty(); }) ||
                        std::ranges::any_of(recipe.split_rules, [](const SplitRule& r) { return !r.pattern.empty(); });
  lua_settop(L, 0);
  if (place_ref != LUA_NOREF || quant_ref != LUA_NOREF || patterns)
    recipe.hooks = std::make_shared<detail::RecipeHooks>(std::move(state), path, place_ref, quant_ref);
  return recipe;
}

Result<Recipe> load_recipe(const std::string& path, const SandboxLimits& limits,
                           const std::optional<std::string>& applied_to) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(Error::from_errno(errno, "open recipe").with_file(path));
  constexpr std::size_t kMaxRecipeBytes = 1 << 20;
  std::string text(kMaxRecipeBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > kMaxRecipeBytes)
    return fail(Error(Errc::kInvalidArgument, "recipe is larger than 1 MiB").with_file(path));
  return parse_recipe(text, path, limits, applied_to);
}

}  // namespace qload::scripts

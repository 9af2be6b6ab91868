#include "recipe_hooks.hpp"

#include <lua.hpp>

#include <fmt/format.h>

#include "qload/formats/quant_codec.hpp"

namespace qload::scripts::detail {
namespace {

Result<DType> parse_float(std::string_view text, std::string_view where) {
  if (text == "bf16") return DType::kBF16;
  if (text == "f16") return DType::kF16;
  if (text == "f32") return DType::kF32;
  return fail(Errc::kInvalidArgument, fmt::format("{}: dequantize = '{}' is not bf16, f16 or f32", where, text));
}

std::optional<std::string> string_at(lua_State* L, int table, const char* key) {
  lua_getfield(L, table, key);
  std::optional<std::string> out;
  if (lua_type(L, -1) == LUA_TSTRING) out = lua_tostring(L, -1);
  lua_pop(L, 1);
  return out;
}

bool true_at(lua_State* L, int table, const char* key) {
  lua_getfield(L, table, key);
  const bool yes = lua_type(L, -1) == LUA_TBOOLEAN && lua_toboolean(L, -1);
  lua_pop(L, 1);
  return yes;
}

}  // namespace

Result<scheduler::WeightPolicy> read_rule_action(lua_State* L, int index, std::string_view where) {
  using Action = scheduler::WeightPolicy::Action;
  if (index < 0 && index > LUA_REGISTRYINDEX) index = lua_gettop(L) + index + 1;  // Lua 5.1 has no lua_absindex
  if (lua_type(L, index) != LUA_TTABLE)
    return fail(Errc::kInvalidArgument, fmt::format("{} must be a table like {{ dequantize = \"bf16\" }}", where));
  int actions = 0;
  scheduler::WeightPolicy policy;
  if (true_at(L, index, "keep") || true_at(L, index, "skip")) {
    actions += true_at(L, index, "keep") + true_at(L, index, "skip");
    policy.action = Action::kKeep;
  }
  if (true_at(L, index, "repack")) {
    ++actions;
    policy.action = Action::kRepack;
  }
  const auto d = string_at(L, index, "dequantize");
  const auto q = string_at(L, index, "quantize");
  if (d) {
    ++actions;
    policy.action = Action::kDequantize;
    QLOAD_ASSIGN_OR_RETURN(policy.dtype, parse_float(*d, where));
  }
  if (q) {
    ++actions;
    policy.action = Action::kQuantize;
    auto target = formats::parse_quantize_target(*q);
    if (!target) return fail(Errc::kInvalidArgument, fmt::format("{}: {}", where, target.error().message()));
    policy.target = *target;
  }
  if (d && q) {  // one action: decode, then quantize the decoded weight
    --actions;
    policy.action = Action::kRequantize;
  }
  if (actions != 1)
    return fail(Errc::kInvalidArgument,
                fmt::format("{} needs exactly one action: keep, skip, dequantize, quantize (or both: requantize) or "
                            "repack",
                            where));
  return policy;
}

RecipeHooks::RecipeHooks(LuaState state, std::string recipe_path, int place_ref, int quant_ref)
    : state_(std::move(state)), path_(std::move(recipe_path)), place_ref_(place_ref), quant_ref_(quant_ref) {
  lua_State* L = state_.get();
  lua_getfield(L, LUA_REGISTRYINDEX, "qload.string_find");
  find_ref_ = luaL_ref(L, LUA_REGISTRYINDEX);
}

bool RecipeHooks::has_place() const noexcept {
  return place_ref_ != LUA_NOREF;
}
bool RecipeHooks::has_quant() const noexcept {
  return quant_ref_ != LUA_NOREF;
}

Result<std::optional<std::string>> RecipeHooks::place(std::string_view name) {
  std::lock_guard lock(mutex_);
  lua_State* L = state_.get();
  const int top = lua_gettop(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, place_ref_);
  lua_pushlstring(L, name.data(), name.size());
  QLOAD_TRY(state_.call(1, 1, path_));
  std::optional<std::string> out;
  const int type = lua_type(L, -1);
  if (type == LUA_TSTRING) out = lua_tostring(L, -1);
  lua_settop(L, top);
  if (type != LUA_TSTRING && type != LUA_TNIL)
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("the placement function returned a {} for '{}', not a device string or nil",
                                  lua_typename(L, type), name))
                    .with_file(path_));
  return out;
}

Result<std::optional<scheduler::WeightPolicy>> RecipeHooks::quant(std::string_view name) {
  std::lock_guard lock(mutex_);
  lua_State* L = state_.get();
  const int top = lua_gettop(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, quant_ref_);
  lua_pushlstring(L, name.data(), name.size());
  QLOAD_TRY(state_.call(1, 1, path_));
  if (lua_isnil(L, -1)) {
    lua_settop(L, top);
    return std::optional<scheduler::WeightPolicy>();
  }
  auto policy = read_rule_action(L, -1, fmt::format("the quant function's answer for '{}'", name));
  lua_settop(L, top);
  if (!policy) return fail(std::move(policy.error()).with_file(path_));
  return std::optional<scheduler::WeightPolicy>(*policy);
}

Result<bool> RecipeHooks::find(std::string_view name, const std::string& pattern) {
  std::lock_guard lock(mutex_);
  lua_State* L = state_.get();
  const int top = lua_gettop(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, find_ref_);
  lua_pushlstring(L, name.data(), name.size());
  lua_pushlstring(L, pattern.data(), pattern.size());
  QLOAD_TRY(state_.call(2, 1, path_));  // a malformed pattern is a Lua error naming it
  const bool found = !lua_isnil(L, -1);
  lua_settop(L, top);
  return found;
}

}  // namespace qload::scripts::detail

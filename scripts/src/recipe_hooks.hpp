// The plan-time side of a recipe: its Lua state kept after evaluation, for the placement
// function, the quant function and Lua-pattern quant rules. Calls are serialised (a Lua
// state is single-threaded) and each runs under fresh sandbox limits.
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "qload/runtime/error.hpp"
#include "qload/scheduler/plan.hpp"
#include "qload/scripts/lua_state.hpp"

struct lua_State;

namespace qload::scripts::detail {

// The action of a rule table at `index` ({ dequantize = "bf16" }, { skip = true }, ...):
// exactly one of keep, skip, dequantize, quantize, repack. `where` names the rule in messages.
// Leaves the stack as it was.
Result<scheduler::WeightPolicy> read_rule_action(lua_State* L, int index, std::string_view where);

class RecipeHooks {
 public:
  // `place_ref` / `quant_ref`: registry references (luaL_ref) to the recipe's placement and
  // quant functions, or LUA_NOREF.
  RecipeHooks(LuaState state, std::string recipe_path, int place_ref, int quant_ref);

  bool has_place() const noexcept;
  bool has_quant() const noexcept;
  // placement(name): a device string, or nullopt for nil.
  Result<std::optional<std::string>> place(std::string_view name);
  // quant(name): a rule table's action, or nullopt for nil.
  Result<std::optional<scheduler::WeightPolicy>> quant(std::string_view name);
  // Whether Lua's string.find(name, pattern) finds it.
  Result<bool> find(std::string_view name, const std::string& pattern);

 private:
  std::mutex mutex_;
  LuaState state_;
  std::string path_;
  int place_ref_;
  int quant_ref_;
  int find_ref_;  // string.find, saved before the recipe ran (a recipe may replace string.find)
};

}  // namespace qload::scripts::detail

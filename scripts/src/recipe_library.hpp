// What a recipe's Lua state has beyond the sandbox's base, string, table and math: qload's
// small standard library (qload.size, qload.glob, and the embedded "qload.*" modules) and a
// `require` that loads only those modules and .lua files inside the recipe's own folder.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "qload/runtime/error.hpp"
#include "qload/scripts/lua_state.hpp"

namespace qload::scripts::detail {

// A helper module read from a file while the recipe ran, for the recipe hash.
struct RequiredModule {
  std::string name;
  std::string path;
  std::string text;
};

// Collects what `require` read. Installed for the recipe's evaluation only: once the recipe
// has run (uninstall_require), a plan-time hook calling require gets an error.
struct RequireContext {
  std::filesystem::path recipe_dir;
  std::vector<RequiredModule> modules;
};

// Adds qload.size, qload.glob and `require` (reading through `context`, which must outlive
// the recipe's evaluation) to the state, whose global `qload` table must exist.
Status install_recipe_library(LuaState& state, RequireContext* context);
// Detaches `require` from its context (the context is about to go).
void uninstall_require(LuaState& state);

}  // namespace qload::scripts::detail

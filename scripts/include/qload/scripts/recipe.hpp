// Recipes: Lua files that say what to load and how.
//
//   return qload.recipe {
//     source  = "models/tiny",            -- a directory, a .safetensors file or an index json;
//                                         -- relative paths are relative to the recipe file
//     devices = "cpu",                     -- or { "cpu" }
//     io      = { engine = "auto", queue_depth = 32, direct = "auto",
//                 chunk = "16MiB", staging = "256MiB" },
//   }
//
// A recipe is evaluated once, at plan time, in the sandbox (lua_state.hpp); only its data
// leaves Lua. Unknown keys and wrong types are errors naming the recipe file and line, with
// a "did you mean" for near misses. This is the minimal recipe; the full language (quant
// rules, parallel placement, lockfiles) comes later.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "qload/runtime/error.hpp"
#include "qload/scripts/lua_state.hpp"

namespace qload::scripts {

struct RecipeIo {
  std::optional<std::string> engine;  // "auto" | "uring" | "pread"
  std::optional<std::uint32_t> queue_depth;
  std::optional<std::string> direct;           // "auto" | "on" | "off"
  std::optional<std::uint64_t> chunk_bytes;    // from "chunk"
  std::optional<std::uint64_t> staging_bytes;  // from "staging"
};

struct Recipe {
  std::string path;                  // the recipe file
  std::string source;                // resolved against the recipe's directory
  std::vector<std::string> devices;  // at least one
  RecipeIo io;
};

// Evaluates `text` as the recipe file `path` (used for error messages and to resolve
// relative sources).
Result<Recipe> parse_recipe(const std::string& text, const std::string& path, const SandboxLimits& limits = {});
// Reads the file (at most 1 MiB) and parses it.
Result<Recipe> load_recipe(const std::string& path, const SandboxLimits& limits = {});

}  // namespace qload::scripts

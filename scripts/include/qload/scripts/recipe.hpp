// Recipes: Lua files that say what to load and how, once, so a load can be shared and locked.
//
//   local presets = require("qload.presets")          -- qload's recipe library
//   local common  = require("common")                 -- common.lua beside this recipe
//   return qload.recipe {
//     source    = "models/llama",        -- a directory, a .safetensors file, an index json, or a
//                                        -- glob naming exactly one of those; relative to this file
//     devices   = "cuda:*",              -- "cpu", "cpu:N", "cuda:N", "cuda:*" (every visible GPU), or a list
//     placement = "by-layer",            -- or "round-robin", or function(name) return "cuda:1" end
//     dtype     = "bf16",                -- unquantized floating tensors: "bf16", "f16" or "f32"
//     quant     = {                      -- per-weight rules, first match wins (or function(name) ... end)
//       { match = "*.mlp.*",            dequantize = "bf16" },        -- a glob (* and ?)
//       { pattern = "self_attn%.[qk]_", quantize = "fp8:block" },     -- a Lua pattern
//       { match = "lm_head.*",          skip = true },                -- leave as stored
//       { match = "*",                  repack = true },
//     },
//     parallel  = { tensor = 2, pipeline = 2, data = 1,   -- devices = data x pipeline x tensor
//                   rules = { { match = "*.wo.weight", split = "cols" } } },   -- else llama defaults
//     settings  = { staging_bytes = "512MB", io_engine = "uring", digests = false },  -- docs/settings.md
//     io        = { engine = "auto", queue_depth = 32, direct = "auto", chunk = "16MiB", staging = "256MiB" },
//     verify    = "qload.lock",          -- load only if every tensor matches this lock
//     trace     = "load.trace.json",     -- a Chrome trace of the load
//     report    = "json",                -- the load's report as JSON ("text" by default)
//   }
//
// A recipe is evaluated once, in the sandbox (lua_state.hpp). Only data leaves Lua, except the
// two narrow hooks (a placement function, a quant function or Lua-pattern rules), which run
// at plan time, once per tensor, never per byte, in the same sandbox under its limits.
// Unknown keys and wrong types are errors naming the recipe file and line, with a "did you
// mean" for near misses. `require` loads only qload's library ("qload.*") and .lua files in
// the recipe's own folder (dots are subfolders; no "..", no escaping symlinks).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qload/distributed/world.hpp"
#include "qload/runtime/error.hpp"
#include "qload/runtime/settings.hpp"
#include "qload/scheduler/load.hpp"
#include "qload/scheduler/plan.hpp"
#include "qload/scripts/lua_state.hpp"

namespace qload::scripts {

// One setting of the settings table (runtime/settings.hpp) as the recipe wrote it, from its
// `settings` table (by the setting's name) or its older `io` table (by its recipe key).
struct RecipeSetting {
  std::string name;  // the table's name: "staging_bytes"
  std::string text;  // the value as text: "512MB", "true", "32"
  std::string key;   // as written: "settings.staging_bytes", "io.staging"
};

struct RecipeParallel {
  std::uint32_t tensor = 1;
  std::uint32_t pipeline = 1;
  std::uint32_t data = 1;
  bool share_reads = false;  // several processes: each tensor read once (ParallelLayout::share_reads)
};

// One quant rule: which weights (a glob or a Lua pattern) and what to do with them.
struct QuantRule {
  std::string glob;     // `match`: * any run of characters, ? one (empty when `pattern` is used)
  std::string pattern;  // `pattern`: a Lua pattern, found anywhere in the name (string.find)
  scheduler::WeightPolicy policy;
  int line = 0;  // in the recipe file, for messages
};

// One parallel.rules entry: which tensors (a glob or a Lua pattern) split how over the tensor
// ranks (sharding.hpp: "rows", "cols", "heads", "halves", "experts", "expert_rows", "expert_halves", "expert_cols",
// "replicate").
struct SplitRule {
  std::string glob;
  std::string pattern;
  scheduler::Split split = scheduler::Split::kReplicate;
  int line = 0;
};

namespace detail {
class RecipeHooks;  // the Lua state the plan-time hooks run in
}

struct Recipe {
  std::string path;                  // the recipe file
  std::string source;                // resolved against the recipe's directory
  std::vector<std::string> devices;  // at least one; "cuda:*" expanded
  std::optional<std::string> placement;
  std::optional<DType> dtype;
  std::vector<QuantRule> quant;
  RecipeParallel parallel;
  std::vector<SplitRule> split_rules;   // parallel.rules, first match wins; none: the llama default
  std::vector<RecipeSetting> settings;  // in the order written; each one parsed when read
  std::optional<std::string> verify;    // a lockfile, resolved against the recipe's directory
  std::optional<std::string> trace;     // resolved likewise
  bool json_report = false;             // report = "json": the load's report as JSON
  // XXH3-64 over the recipe's text and every module it required (name and text, in the order
  // they were loaded): a lock records it, so an edited recipe or helper is noticed.
  std::uint64_t hash = 0;
  std::vector<std::string> modules;  // files it required, in order

  // The rule for weight `name`: the first quant rule that matches, or the quant function's
  // answer; nullopt when none applies. Errors (a hook that fails or returns nonsense) name
  // the recipe file.
  Result<std::optional<scheduler::WeightPolicy>> weight_policy(std::string_view name) const;
  // The placement function's device for tensor `name`, as an index into `devices`; nullopt
  // when there is no function or it returns nil.
  Result<std::optional<std::uint32_t>> place(std::string_view name) const;
  // The split of tensor `name` over the tensor ranks from parallel.rules; nullopt when no rule
  // matches (the scheduler's llama-style default applies).
  Result<std::optional<scheduler::Split>> split(std::string_view name) const;
  bool has_place_hook() const;
  bool has_quant_hook() const;  // a quant function, or pattern rules
  // Applies the recipe to load options: devices, placement, dtype, rules and hooks, pipeline
  // stages (its settings go through apply_settings, below the environment). The hooks keep this recipe's Lua state
  // alive (shared), so the options may outlive the Recipe. `world`: one process of a multi-process load (its devices
  // are its share of the layout's).
  Status apply(scheduler::LoadOptions& options, const std::optional<distributed::World>& world = std::nullopt) const;
  // Sets the recipe's settings at recipe precedence; errors name the recipe file and the key.
  Status apply_settings(ResolvedSettings& settings) const;

  std::shared_ptr<detail::RecipeHooks> hooks;  // null when the recipe has no hooks
};

// Evaluates `text` as the recipe file `path` (used for error messages, to resolve relative
// paths and to find required modules). `applied_to`: the recipe describes how to load that
// checkpoint (`qload load CKPT --recipe R`, Python's `recipe=`), so the recipe's own `source`
// is optional and, if present, not used.
Result<Recipe> parse_recipe(const std::string& text, const std::string& path, const SandboxLimits& limits = {},
                            const std::optional<std::string>& applied_to = std::nullopt);
// Reads the file (at most 1 MiB) and parses it.
Result<Recipe> load_recipe(const std::string& path, const SandboxLimits& limits = {},
                           const std::optional<std::string>& applied_to = std::nullopt);

}  // namespace qload::scripts

// What to load and how, from `qload load` / `qload convert` arguments or a recipe (a recipe's
// settings are the defaults; a flag given on the command line that contradicts it is an error).
#pragma once

#include <optional>
#include <string>

#include "commands.hpp"
#include "qload/runtime/error.hpp"
#include "qload/runtime/log.hpp"
#include "qload/runtime/settings.hpp"
#include "qload/runtime/world.hpp"
#include "qload/scheduler/load.hpp"
#include "qload/scripts/recipe.hpp"

namespace qload::cli {

struct LoadRequest {
  std::string source;
  std::optional<scripts::Recipe> recipe;  // when the path was a recipe
  std::string devices = "cpu";            // as given, for reports
  scheduler::LoadOptions options;
  // One process of a multi-process load (torchrun-style environment, world.hpp): its
  // layout's processes and process are the world's size and rank.
  std::optional<World> world;
  // Every setting (runtime/settings.hpp) and where it came from: default < recipe <
  // environment < flags (--set, --mmap, --no-digests); already applied to `options`.
  ResolvedSettings settings;
};

Result<LoadRequest> build_request(const LoadArgs& args);

// A setting given on the command line: `where` names the flag in errors ("--set staging_bytes").
struct SettingFlag {
  std::string name;
  std::string value;
  std::string where;
};
// --set NAME=VALUE (kInvalidArgument without the '='), --mmap and --no-digests.
Result<std::vector<SettingFlag>> setting_flags(const std::vector<std::string>& set, bool mmap = false,
                                               bool no_digests = false);

// The settings of a load: `recipe`'s (if any), then the environment, then the flags.
// Warnings (an unknown QLOAD_* variable) go to `log`.
Result<ResolvedSettings> resolve_settings(const scripts::Recipe* recipe, const std::vector<SettingFlag>& flags,
                                          const Logger& log);

// A request with its checkpoint opened and planned: what `qload plan`, `qload lock` and
// `qload load` share.
struct PlannedLoad {
  LoadRequest request;
  formats::Catalog catalog;
  scheduler::Plan plan;
  std::uint64_t plan_hash = 0;  // plan_report.hpp
};
Result<PlannedLoad> plan_request(const LoadArgs& args);
Result<PlannedLoad> plan_request(LoadRequest request);

// The lockfile a load must match: --locked, else the recipe's `verify`; empty for none.
// kInvalidArgument when both are given and differ.
Result<std::string> lock_path(const LoadArgs& args, const LoadRequest& request);

// Before anything is read: kChecksumMismatch naming the lock unless the recipe hash, the plan
// hash, the files (names, sizes) and the tensor names match it; then every tensor's digest
// becomes an expected digest, so the load fails (exposing nothing) if any byte differs. One
// process of a multi-process load skips the plan hash (a lock records a single-process plan;
// the ranks check their plans against each other instead) and reads whole every tensor it
// holds part of, so every digest it meets is checked.
Status apply_lock(const std::string& lock_file, PlannedLoad& load);

}  // namespace qload::cli

// What `qload plan`, `qload lock`, `qload verify` and `qload load --locked` share: a request
// opened and planned, and the checks a lock makes before any tensor byte is read.
#include <fmt/format.h>

#include "load_request.hpp"
#include "plan_report.hpp"
#include "qload/io/digest.hpp"
#include "qload/scripts/lockfile.hpp"

namespace qload::cli {

Result<PlannedLoad> plan_request(const LoadArgs& args) {
  QLOAD_ASSIGN_OR_RETURN(LoadRequest request, build_request(args));
  return plan_request(std::move(request));
}

Result<PlannedLoad> plan_request(LoadRequest request) {
  QLOAD_ASSIGN_OR_RETURN(formats::Catalog catalog, scheduler::open_source(request.source));
  QLOAD_ASSIGN_OR_RETURN(scheduler::Plan plan, scheduler::make_plan(catalog, request.options.plan));
  const std::uint64_t hash = plan_hash(plan_json(catalog, plan));
  return PlannedLoad{
      .request = std::move(request), .catalog = std::move(catalog), .plan = std::move(plan), .plan_hash = hash};
}

Result<std::string> lock_path(const LoadArgs& args, const LoadRequest& request) {
  const std::optional<std::string> from_recipe = request.recipe ? request.recipe->verify : std::nullopt;
  if (!args.locked.empty() && from_recipe && *from_recipe != args.locked)
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("--locked {} contradicts the recipe's verify = {}", args.locked, *from_recipe))
                    .with_file(args.path));
  if (!args.locked.empty()) return args.locked;
  return from_recipe.value_or("");
}

Status apply_lock(const std::string& lock_file, PlannedLoad& load) {
  QLOAD_ASSIGN_OR_RETURN(const scripts::Lockfile lock, scripts::read_lockfile(lock_file));
  std::vector<std::string> differences;
  const std::optional<scripts::Recipe>& recipe = load.request.recipe;
  if (lock.recipe_hash && !recipe)
    differences.push_back(fmt::format("the lock was made from the recipe {}; this load has none", lock.recipe));
  if (recipe && lock.recipe_hash != recipe->hash)
    differences.push_back(
        lock.recipe_hash ? fmt::format("the recipe hashes to {}, the lock says {} (the recipe or a module it requires "
                                       "changed)",
                                       io::hex64(recipe->hash), io::hex64(*lock.recipe_hash))
                         : "the lock was made without a recipe; this load runs one");
  if (!load.request.world && lock.plan_hash != load.plan_hash)
    differences.push_back(fmt::format("the plan hashes to {}, the lock says {} (`qload plan` shows what goes where)",
                                      io::hex64(load.plan_hash), io::hex64(lock.plan_hash)));
  for (std::string& d : scripts::lock_differences(lock, load.catalog)) differences.push_back(std::move(d));
  if (!differences.empty()) {
    std::string message = fmt::format("the checkpoint does not match the lock: {}", differences.front());
    if (differences.size() > 1) message += fmt::format(" (and {} more differences)", differences.size() - 1);
    return fail(Error(Errc::kChecksumMismatch, message).with_file(lock_file));
  }
  load.request.options.expected_xxh3_64 = lock.tensors;
  return {};
}

}  // namespace qload::cli

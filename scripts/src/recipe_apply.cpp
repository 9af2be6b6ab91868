// A parsed recipe put to use: its rules and hooks answer the scheduler's per-weight and
// per-tensor questions at plan time, and its settings become load options.
#include <fnmatch.h>

#include <fmt/format.h>

#include "qload/runtime/device.hpp"
#include "qload/scripts/recipe.hpp"
#include "recipe_hooks.hpp"

namespace qload::scripts {

bool Recipe::has_place_hook() const {
  return hooks && hooks->has_place();
}
bool Recipe::has_quant_hook() const {
  return hooks &&
         (hooks->has_quant() || std::ranges::any_of(quant, [](const QuantRule& r) { return !r.pattern.empty(); }));
}

namespace {

// Whether rule (glob or Lua pattern) names `name`.
template <typename Rule>
Result<bool> rule_matches(const Rule& rule, const std::shared_ptr<detail::RecipeHooks>& hooks, std::string_view name) {
  if (!rule.glob.empty()) return ::fnmatch(rule.glob.c_str(), std::string(name).c_str(), 0) == 0;
  if (rule.pattern.empty() || !hooks)  // the recipe reader refuses such rules; never dereference
    return fail(Error(Errc::kInternal, fmt::format("recipe rule at line {} names no tensors", rule.line)));
  return hooks->find(name, rule.pattern);
}

}  // namespace

Result<std::optional<scheduler::WeightPolicy>> Recipe::weight_policy(std::string_view name) const {
  if (hooks && hooks->has_quant()) return hooks->quant(name);
  for (const QuantRule& rule : quant) {
    QLOAD_ASSIGN_OR_RETURN(const bool matches, rule_matches(rule, hooks, name));
    if (matches) return std::optional<scheduler::WeightPolicy>(rule.policy);
  }
  return std::optional<scheduler::WeightPolicy>();
}

Result<std::optional<scheduler::Split>> Recipe::split(std::string_view name) const {
  for (const SplitRule& rule : split_rules) {
    QLOAD_ASSIGN_OR_RETURN(const bool matches, rule_matches(rule, hooks, name));
    if (matches) return std::optional<scheduler::Split>(rule.split);
  }
  return std::optional<scheduler::Split>();
}

Result<std::optional<std::uint32_t>> Recipe::place(std::string_view name) const {
  if (!has_place_hook()) return std::optional<std::uint32_t>();
  QLOAD_ASSIGN_OR_RETURN(const std::optional<std::string> device, hooks->place(name));
  if (!device) return std::optional<std::uint32_t>();
  auto parsed = parse_device(*device);
  if (parsed) {
    const std::string canonical = parsed->to_string();
    for (std::uint32_t i = 0; i < devices.size(); ++i)
      if (devices[i] == canonical) return std::optional<std::uint32_t>(i);
  }
  return fail(Error(Errc::kInvalidArgument,
                    fmt::format("the placement function put '{}' on '{}', which is not one of the recipe's devices "
                                "({})",
                                name, *device, fmt::join(devices, ", ")))
                  .with_file(path));
}

Status Recipe::apply(scheduler::LoadOptions& options, const std::optional<distributed::World>& world) const {
  const auto error = [this](Errc code, std::string message) {
    return fail(Error(code, std::move(message)).with_file(path));
  };
  QLOAD_ASSIGN_OR_RETURN(options.plan.devices, parse_device_list(fmt::format("{}", fmt::join(devices, ","))));
  if (placement) {
    QLOAD_ASSIGN_OR_RETURN(options.plan.placement, scheduler::parse_placement(*placement));
  }
  const std::uint32_t processes = world ? world->size : 1;
  const scheduler::ParallelLayout layout{.tensor = parallel.tensor,
                                         .pipeline = parallel.pipeline,
                                         .data = parallel.data,
                                         .processes = processes,
                                         .process = world ? world->rank : 0,
                                         .share_reads = parallel.share_reads};
  if (parallel.share_reads && processes == 1)
    return error(Errc::kInvalidArgument, "parallel.share_reads needs a multi-process load (WORLD_SIZE above 1)");
  if (!layout.trivial()) {
    if (layout.devices() != devices.size() * processes)
      return error(Errc::kInvalidArgument,
                   processes == 1
                       ? fmt::format("parallel = {{ tensor = {}, pipeline = {}, data = {} }} needs {} devices; the "
                                     "recipe lists {}",
                                     layout.tensor, layout.pipeline, layout.data, layout.devices(), devices.size())
                       : fmt::format("parallel = {{ tensor = {}, pipeline = {}, data = {} }} needs {} devices; {} "
                                     "processes (WORLD_SIZE) with the recipe's {} hold {}",
                                     layout.tensor, layout.pipeline, layout.data, layout.devices(), processes,
                                     devices.size(), devices.size() * processes));
    if (placement || has_place_hook())
      return error(Errc::kInvalidArgument,
                   "'placement' contradicts 'parallel': a parallel layout places every tensor itself (pipeline "
                   "stages by layer, tensor shards, data replicas)");
    options.plan.parallel = layout;
  }
  if (!split_rules.empty() && layout.tensor == 1)
    return error(Errc::kInvalidArgument, "parallel.rules need parallel.tensor greater than 1");
  if (dtype) options.plan.dtype = *dtype;
  // The hooks hold a copy of this recipe (and through it the Lua state), so the options do
  // not depend on this object's lifetime.
  const auto self = std::make_shared<const Recipe>(*this);
  if (!quant.empty() || has_quant_hook())
    options.plan.weight_policy = [self](std::string_view name) { return self->weight_policy(name); };
  if (has_place_hook()) options.plan.place = [self](std::string_view name) { return self->place(name); };
  if (!split_rules.empty()) options.plan.split = [self](std::string_view name) { return self->split(name); };
  return {};
}

Status Recipe::apply_settings(ResolvedSettings& resolved) const {
  for (const RecipeSetting& s : settings)
    if (Status set = resolved.set(s.name, s.text, SettingSource::kRecipe, s.key); !set)
      return fail(std::move(set.error()).with_file(path));
  return {};
}

}  // namespace qload::scripts

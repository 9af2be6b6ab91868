// From a client's LoadSpec to a planned, lock-checked load: recipe, settings, options, plan,
// and the checks a lock makes before any tensor byte is read.
#include <cstdlib>
#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "qload/io/digest.hpp"
#include "qload/runtime/device.hpp"
#include "qload/session/lockfile.hpp"
#include "qload/session/plan_report.hpp"
#include "qload/session/request.hpp"

namespace qload::session {
namespace {

// "bf16" / "f16" / "f32" (also the safetensors spellings BF16, F16, F32).
Result<DType> parse_float_dtype(std::string_view flag, std::string_view text) {
  if (text == "bf16" || text == "BF16") return DType::kBF16;
  if (text == "f16" || text == "F16") return DType::kF16;
  if (text == "f32" || text == "F32") return DType::kF32;
  return fail(Errc::kInvalidArgument, fmt::format("{} {}: expected bf16, f16 or f32", flag, text));
}

}  // namespace

Result<std::optional<distributed::World>> world_of(const LoadSpec& spec) {
  if (!spec.world) return distributed::world_from_env(std::getenv);
  QLOAD_ASSIGN_OR_RETURN(distributed::World world, distributed::complete_world(*spec.world));
  if (world.size == 1) return std::optional<distributed::World>();
  return std::optional<distributed::World>(std::move(world));
}

namespace {

// The recipe (the source itself, or one applied to the checkpoint) into `req`: its source,
// options and devices, refusing flags that contradict it.
Status apply_recipe(const LoadSpec& spec, LoadRequest& req, std::string& devices) {
  if (!spec.recipe.empty() && spec.source.ends_with(".lua"))
    return fail(
        Error(Errc::kInvalidArgument, fmt::format("{} {} is applied to a checkpoint, and the source is itself a recipe",
                                                  spec.names.recipe, spec.recipe))
            .with_file(spec.source));
  if (spec.recipe.empty() && !spec.source.ends_with(".lua")) return {};
  const std::string& recipe_path = spec.recipe.empty() ? spec.source : spec.recipe;
  QLOAD_ASSIGN_OR_RETURN(scripts::Recipe recipe, spec.recipe.empty()
                                                     ? scripts::load_recipe(spec.source)
                                                     : scripts::load_recipe(spec.recipe, {}, spec.source));
  req.source = recipe.source;
  const std::string recipe_devices = fmt::format("{}", fmt::join(recipe.devices, ","));
  const auto contradicts = [&](std::string_view flag, const std::string& given, const std::string& in_recipe) {
    return fail(Error(Errc::kInvalidArgument, fmt::format("{} {} contradicts the recipe's {}", flag, given, in_recipe))
                    .with_file(recipe_path));
  };
  if (!devices.empty() && devices != recipe_devices) return contradicts(spec.names.devices, devices, recipe_devices);
  if (!spec.placement.empty() && recipe.placement && spec.placement != *recipe.placement)
    return contradicts(spec.names.placement, spec.placement, *recipe.placement);
  if (!spec.dtype.empty() && recipe.dtype && parse_float_dtype(spec.names.dtype, spec.dtype) != *recipe.dtype)
    return contradicts(spec.names.dtype, spec.dtype, std::string(dtype_name(*recipe.dtype)));
  devices = recipe_devices;
  QLOAD_TRY(recipe.apply(req.options, req.world));
  req.recipe = std::move(recipe);
  return {};
}

// The lock and the trace file: the spec's, else the recipe's.
Status set_lock_and_trace(const LoadSpec& spec, LoadRequest& req) {
  const std::optional<std::string> verify = req.recipe ? req.recipe->verify : std::nullopt;
  if (!spec.lock.empty() && verify && *verify != spec.lock)
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("{} {} contradicts the recipe's verify = {}", spec.names.lock, spec.lock, *verify))
                    .with_file(req.recipe->path));
  req.lock = !spec.lock.empty() ? spec.lock : verify.value_or("");
  req.trace = !spec.trace.empty() ? spec.trace : (req.recipe ? req.recipe->trace.value_or("") : "");
  req.trace_overwrite = !spec.trace.empty() || spec.overwrite;
  // Refused before anything loads (the write itself refuses too, for a file made meanwhile).
  if (std::error_code ec; !req.trace_overwrite && !req.trace.empty() && std::filesystem::exists(req.trace, ec))
    return fail(Error(Errc::kInvalidArgument,
                      "the recipe's trace file exists; qload replaces it only when told to (qload load --overwrite)")
                    .with_file(req.trace));
  return {};
}

// Placement, dtype policies and the parallel layout from the spec's flags; flags set the layout
// only where the recipe has none (a contradiction is an error).
Status set_plan_flags(const LoadSpec& spec, LoadRequest& req) {
  if (!spec.placement.empty()) {
    QLOAD_ASSIGN_OR_RETURN(req.options.plan.placement, scheduler::parse_placement(spec.placement));
  }
  if (!spec.dtype.empty()) {
    QLOAD_ASSIGN_OR_RETURN(req.options.plan.dtype, parse_float_dtype(spec.names.dtype, spec.dtype));
  }
  if (!spec.dequantize.empty()) {
    QLOAD_ASSIGN_OR_RETURN(req.options.plan.dequantize, parse_float_dtype(spec.names.dequantize, spec.dequantize));
  }
  if (!spec.quantize.empty()) {
    QLOAD_ASSIGN_OR_RETURN(req.options.plan.quantize, formats::parse_quantize_target(spec.quantize));
  }
  req.options.plan.repack = spec.repack;
  scheduler::ParallelLayout& layout = req.options.plan.parallel;
  const auto set = [&](std::uint32_t given, std::uint32_t& field, std::string_view flag) -> Status {
    if (given == 0) return {};
    if (field != 1 && field != given)
      return fail(Error(Errc::kInvalidArgument, fmt::format("{} {} contradicts the recipe's {}", flag, given, field))
                      .with_file(req.recipe ? req.recipe->path : spec.source));
    field = given;
    return {};
  };
  QLOAD_TRY(set(spec.tensor_parallel, layout.tensor, spec.names.tensor_parallel));
  QLOAD_TRY(set(spec.pipeline_parallel, layout.pipeline, spec.names.pipeline_parallel));
  QLOAD_TRY(set(spec.data_parallel, layout.data, spec.names.data_parallel));
  return {};
}

// What a multi-process load needs: a parallel layout, and for shared reads or a server's own
// NCCL communicators, a world of more than one process.
Status set_world(const LoadSpec& spec, LoadRequest& req) {
  if (req.world && req.options.plan.parallel.trivial())
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("WORLD_SIZE is {} but the load has no parallel layout: give {}, {} or {} (or a "
                                  "recipe's parallel), or unset WORLD_SIZE",
                                  req.world->size, spec.names.tensor_parallel, spec.names.pipeline_parallel,
                                  spec.names.data_parallel)));
  if (spec.share_reads && !req.world)
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("{} needs a multi-process load (WORLD_SIZE above 1)", spec.names.share_reads)));
  if (spec.share_reads) req.options.plan.parallel.share_reads = true;
  if (spec.nccl_comms.empty()) return {};
  if (!req.world)
    return fail(Error(Errc::kInvalidArgument, "NCCL communicators were handed in for a single-process load"));
  if (spec.nccl_comms.size() != req.options.plan.devices.size())
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("{} NCCL communicators handed in for {} devices ({}): one per device, null for "
                                  "a cpu device",
                                  spec.nccl_comms.size(), req.options.plan.devices.size(), req.devices)));
  req.nccl_comms = spec.nccl_comms;
  return {};
}

// The parts of tensors the caller asked for (regions) and the memory it gave (destinations).
Status set_parts(const LoadSpec& spec, LoadRequest& req) {
  if (!spec.regions.empty()) {
    req.regions = spec.regions;
    req.options.plan.region =
        [regions = spec.regions](std::string_view name) -> Result<std::optional<scheduler::TensorRegion>> {
      const auto it = regions.find(std::string(name));
      if (it == regions.end()) return std::nullopt;
      return it->second;
    };
    req.options.plan.whole_tensor_reads = !req.lock.empty();
  }
  if (!spec.destinations.empty() || spec.destinations_only)
    QLOAD_TRY(set_destinations(req, spec.destinations, spec.destinations_only));
  return {};
}

}  // namespace

Result<LoadRequest> build_request(const LoadSpec& spec, const Logger& log) {
  LoadRequest req;
  req.source = spec.source;
  QLOAD_ASSIGN_OR_RETURN(req.world, world_of(spec));
  std::string devices = spec.devices;
  QLOAD_TRY(apply_recipe(spec, req, devices));
  QLOAD_TRY(set_lock_and_trace(spec, req));
  // "cuda:local": the GPU of this process's LOCAL_RANK (one process per GPU under torchrun,
  // which gives every process the same arguments).
  if (const std::size_t at = devices.find("cuda:local"); at != std::string::npos)
    devices.replace(at, std::string_view("cuda:local").size(),
                    fmt::format("cuda:{}", req.world ? req.world->local_rank : 0));
  req.devices = devices.empty() ? "cpu" : devices;
  if (!req.recipe) {
    QLOAD_ASSIGN_OR_RETURN(req.options.plan.devices, parse_device_list(req.devices));
  }
  QLOAD_TRY(set_plan_flags(spec, req));
  QLOAD_TRY(set_world(spec, req));
  QLOAD_TRY(set_parts(spec, req));
  if (req.world) {
    req.options.plan.parallel.processes = req.world->size;
    req.options.plan.parallel.process = req.world->rank;
    // A locked load checks every digest it meets: each tensor it holds part of is read whole.
    req.options.plan.whole_tensor_reads = !req.lock.empty();
  }
  req.options.log = log;
  QLOAD_ASSIGN_OR_RETURN(req.settings, resolve_settings(req.recipe ? &*req.recipe : nullptr, spec.settings, log));
  QLOAD_TRY(req.options.apply(req.settings.values()));
  // A lock pins the plan, mode included: auto would make it depend on the page cache.
  if (!req.lock.empty() && req.options.plan.mode == scheduler::LoadMode::kAuto)
    req.options.plan.mode = scheduler::LoadMode::kRead;
  return req;
}

Status set_destinations(LoadRequest& request, std::map<std::string, scheduler::Destination, std::less<>> destinations,
                        bool only) {
  if (request.world)
    return fail(Error(Errc::kUnsupported,
                      "destinations are filled by a single-process load: each rank of a server loads its own "
                      "(its rank's regions), with WORLD_SIZE unset"));
  request.options.plan.destinations = std::move(destinations);
  request.options.plan.destinations_only = only;
  if (!request.lock.empty()) request.options.plan.whole_tensor_reads = true;  // every destined digest is checked
  return {};
}

Result<std::vector<SettingFlag>> parse_setting_assignments(const std::vector<std::string>& assignments,
                                                           std::string_view where_prefix) {
  std::vector<SettingFlag> flags;
  for (const std::string& assignment : assignments) {
    const std::size_t eq = assignment.find('=');
    if (eq == std::string::npos || eq == 0)
      return fail(Errc::kInvalidArgument, fmt::format("{} {}: expected NAME=VALUE", where_prefix, assignment));
    const std::string name = assignment.substr(0, eq);
    flags.push_back({name, assignment.substr(eq + 1), fmt::format("{} {}", where_prefix, name)});
  }
  return flags;
}

Result<ResolvedSettings> resolve_settings(const scripts::Recipe* recipe, const std::vector<SettingFlag>& flags,
                                          const Logger& log) {
  ResolvedSettings settings;
  if (recipe != nullptr) QLOAD_TRY(recipe->apply_settings(settings));
  std::vector<std::string> warnings;
  QLOAD_TRY(settings.apply_environment(process_environment(), warnings));
  for (const std::string& w : warnings) log.warn(w);
  for (const SettingFlag& f : flags) QLOAD_TRY(settings.set(f.name, f.value, SettingSource::kOption, f.where));
  settings.fit_defaults();
  return settings;
}

Result<ResolvedSettings> resolve_settings(const std::string& source, const std::vector<SettingFlag>& flags,
                                          const Logger& log) {
  if (!source.ends_with(".lua")) return resolve_settings(nullptr, flags, log);
  QLOAD_ASSIGN_OR_RETURN(const scripts::Recipe recipe, scripts::load_recipe(source));
  return resolve_settings(&recipe, flags, log);
}

Result<PlannedLoad> plan_request(LoadRequest request) {
  QLOAD_ASSIGN_OR_RETURN(formats::Catalog catalog, scheduler::open_source(request.source));
  if (!request.regions.empty()) {  // a region of a name the checkpoint lacks is a mistake, not a no-op
    std::set<std::string_view> names;
    for (const formats::TensorEntry& t : catalog.tensors) names.insert(t.name);
    for (const auto& [name, region] : request.regions)
      if (!names.contains(name))
        return fail(Error(Errc::kNotFound, "a region is asked of a tensor the checkpoint does not have")
                        .with_tensor(name)
                        .with_file(catalog.source));
  }
  QLOAD_ASSIGN_OR_RETURN(scheduler::Plan plan, scheduler::make_plan(catalog, request.options.plan));
  const std::uint64_t hash = plan_hash(catalog, plan);
  return PlannedLoad{
      .request = std::move(request), .catalog = std::move(catalog), .plan = std::move(plan), .plan_hash = hash};
}

Result<PlannedLoad> prepare(LoadRequest request) {
  QLOAD_ASSIGN_OR_RETURN(PlannedLoad planned, plan_request(std::move(request)));
  if (!planned.request.lock.empty()) QLOAD_TRY(apply_lock(planned.request.lock, planned));
  return planned;
}

Status apply_lock(const std::string& lock_file, PlannedLoad& load) {
  QLOAD_ASSIGN_OR_RETURN(const Lockfile lock, read_lockfile(lock_file));
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
  const scheduler::PlanOptions& planned = load.request.options.plan;
  if (!load.request.world && !planned.region && planned.destinations.empty() && lock.plan_hash != load.plan_hash)
    differences.push_back(fmt::format("the plan hashes to {}, the lock says {} (`qload plan` shows what goes where)",
                                      io::hex64(load.plan_hash), io::hex64(lock.plan_hash)));
  for (std::string& d : lock_differences(lock, load.catalog)) differences.push_back(std::move(d));
  if (!differences.empty()) {
    std::string message = fmt::format("the checkpoint does not match the lock: {}", differences.front());
    if (differences.size() > 1) message += fmt::format(" (and {} more differences)", differences.size() - 1);
    return fail(Error(Errc::kChecksumMismatch, message).with_file(lock_file));
  }
  load.request.options.expected_xxh3_64 = lock.tensors;
  return {};
}

}  // namespace qload::session

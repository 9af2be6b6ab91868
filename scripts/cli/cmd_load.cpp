// `qload load PATH|RECIPE.lua`: runs a load and reports it; optionally traces it and dumps
// what was loaded as safetensors so other tools can check the bytes.
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "load_request.hpp"
#include "progress_bar.hpp"
#include "qload/formats/safetensors_writer.hpp"
#include "qload/io/reader.hpp"
#include "qload/runtime/device.hpp"
#include "qload/runtime/trace.hpp"
#include "qload/runtime/units.hpp"
#include "qload/scheduler/load.hpp"
#include "qload/scripts/recipe.hpp"
#include "world_load.hpp"

namespace qload::cli {
namespace {

std::uint64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

// "bf16" / "f16" / "f32" (also the safetensors spellings BF16, F16, F32).
Result<DType> parse_float_dtype(std::string_view flag, std::string_view text) {
  if (text == "bf16" || text == "BF16") return DType::kBF16;
  if (text == "f16" || text == "F16") return DType::kF16;
  if (text == "f32" || text == "F32") return DType::kF32;
  return fail(Errc::kInvalidArgument, fmt::format("{} {}: expected bf16, f16 or f32", flag, text));
}

}  // namespace

Result<LoadRequest> build_request(const LoadArgs& args) {
  LoadRequest req;
  req.source = args.path;
  QLOAD_ASSIGN_OR_RETURN(req.world, world_from_env(std::getenv));
  std::string devices = args.device;
  if (args.path.ends_with(".lua")) {
    QLOAD_ASSIGN_OR_RETURN(scripts::Recipe recipe, scripts::load_recipe(args.path));
    req.source = recipe.source;
    const std::string recipe_devices = fmt::format("{}", fmt::join(recipe.devices, ","));
    const auto contradicts = [&](std::string_view flag, const std::string& given, const std::string& in_recipe) {
      return fail(
          Error(Errc::kInvalidArgument, fmt::format("{} {} contradicts the recipe's {}", flag, given, in_recipe))
              .with_file(args.path));
    };
    if (!devices.empty() && devices != recipe_devices) return contradicts("--device", devices, recipe_devices);
    if (!args.placement.empty() && recipe.placement && args.placement != *recipe.placement)
      return contradicts("--placement", args.placement, *recipe.placement);
    if (!args.dtype.empty() && recipe.dtype && parse_float_dtype("--dtype", args.dtype) != *recipe.dtype)
      return contradicts("--dtype", args.dtype, std::string(dtype_name(*recipe.dtype)));
    devices = recipe_devices;
    QLOAD_TRY(recipe.apply(req.options, req.world));
    req.recipe = std::move(recipe);
  }
  // "cuda:local": the GPU of this process's LOCAL_RANK (one process per GPU under torchrun,
  // which gives every process the same arguments).
  if (const std::size_t at = devices.find("cuda:local"); at != std::string::npos)
    devices.replace(at, std::string_view("cuda:local").size(),
                    fmt::format("cuda:{}", req.world ? req.world->local_rank : 0));
  req.devices = devices.empty() ? "cpu" : devices;
  if (!req.recipe) {
    QLOAD_ASSIGN_OR_RETURN(req.options.plan.devices, parse_device_list(req.devices));
  }
  if (!args.placement.empty()) {
    QLOAD_ASSIGN_OR_RETURN(req.options.plan.placement, scheduler::parse_placement(args.placement));
  }
  if (!args.dtype.empty()) {
    QLOAD_ASSIGN_OR_RETURN(req.options.plan.dtype, parse_float_dtype("--dtype", args.dtype));
  }
  if (!args.dequantize.empty()) {
    QLOAD_ASSIGN_OR_RETURN(req.options.plan.dequantize, parse_float_dtype("--dequantize", args.dequantize));
  }
  if (!args.quantize.empty()) {
    QLOAD_ASSIGN_OR_RETURN(req.options.plan.quantize, formats::parse_quantize_target(args.quantize));
  }
  req.options.plan.repack = args.repack;
  if (args.tensor_parallel != 0 || args.pipeline_parallel != 0 || args.data_parallel != 0) {
    // Flags set the layout only where the recipe has none (a contradiction is an error).
    scheduler::ParallelLayout& layout = req.options.plan.parallel;
    const auto set = [&](std::uint32_t given, std::uint32_t& field, std::string_view flag) -> Status {
      if (given == 0) return {};
      if (field != 1 && field != given)
        return fail(Error(Errc::kInvalidArgument, fmt::format("{} {} contradicts the recipe's {}", flag, given, field))
                        .with_file(args.path));
      field = given;
      return {};
    };
    QLOAD_TRY(set(args.tensor_parallel, layout.tensor, "--tp"));
    QLOAD_TRY(set(args.pipeline_parallel, layout.pipeline, "--pp"));
    QLOAD_TRY(set(args.data_parallel, layout.data, "--dp"));
  }
  if (req.world && req.options.plan.parallel.trivial())
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("WORLD_SIZE is {} but the load has no parallel layout: give --tp, --pp or --dp (or "
                                  "a recipe's parallel), or unset WORLD_SIZE",
                                  req.world->size)));
  if (args.share_reads && !req.world)
    return fail(Error(Errc::kInvalidArgument, "--share-reads needs a multi-process load (WORLD_SIZE above 1)"));
  if (args.share_reads) req.options.plan.parallel.share_reads = true;
  if (req.world) {
    req.options.plan.parallel.processes = req.world->size;
    req.options.plan.parallel.process = req.world->rank;
    // A locked load checks every digest it meets: each tensor it holds part of is read whole.
    req.options.plan.whole_tensor_reads = !args.locked.empty() || (req.recipe && req.recipe->verify);
  }
  req.options.log = Logger::to_stderr(LogLevel::kWarn);
  QLOAD_ASSIGN_OR_RETURN(const std::vector<SettingFlag> flags, setting_flags(args.set, args.mmap, args.no_digests));
  QLOAD_ASSIGN_OR_RETURN(req.settings, resolve_settings(req.recipe ? &*req.recipe : nullptr, flags, req.options.log));
  QLOAD_TRY(req.options.apply(req.settings.values()));
  return req;
}

Result<std::vector<SettingFlag>> setting_flags(const std::vector<std::string>& set, bool mmap, bool no_digests) {
  std::vector<SettingFlag> flags;
  if (mmap) flags.push_back({"load_mode", "mmap", "--mmap"});
  if (no_digests) flags.push_back({"digests", "off", "--no-digests"});
  for (const std::string& assignment : set) {
    const std::size_t eq = assignment.find('=');
    if (eq == std::string::npos || eq == 0)
      return fail(Errc::kInvalidArgument, fmt::format("--set {}: expected NAME=VALUE", assignment));
    const std::string name = assignment.substr(0, eq);
    flags.push_back({name, assignment.substr(eq + 1), "--set " + name});
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
  return settings;
}

// One safetensors file per device, DIR/<device>.safetensors (DIR/rank<R>.<device>.safetensors
// for one process of a multi-process load); GPU tensors are copied back a
// writer chunk at a time, so a dump holds no more than one chunk of host memory for them.
namespace {

// `prefix` keeps the files of the ranks of a multi-process load apart ("rank1.").
Status dump(const scheduler::Model& model, const std::string& dir, const std::string& prefix) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return fail(Error(Errc::kIo, "create directory: " + ec.message()).with_file(dir));
  std::map<std::string, std::vector<formats::WriterTensor>> by_device;
  for (const scheduler::DeviceTensor& t : model.tensors()) {
    formats::WriterTensor w{t.name, t.dtype, t.shape, t.bytes(), {}};
    if (!t.host) {
      w.fill = [&model, &t](std::uint64_t offset, std::span<std::byte> out) {
        return model.copy_to_host(t, offset, out);
      };
    }
    by_device[t.device].push_back(std::move(w));
  }
  for (auto& [device, tensors] : by_device)
    QLOAD_TRY(formats::write_safetensors((std::filesystem::path(dir) / (prefix + device + ".safetensors")).string(),
                                         tensors, {.metadata = {{"written_by", "qload load --dump"}}}));
  return {};
}

nlohmann::json report_json(const scheduler::LoadReport& r, const std::string& devices, std::uint64_t rss) {
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& s : r.stages)
    stages.push_back({{"stage", s.lane},
                      {"tasks", s.tasks},
                      {"bytes", s.bytes},
                      {"busy_seconds", s.busy_seconds},
                      {"task_seconds", s.task_seconds}});
  return {{"schema", "qload.load/1"},
          {"device", devices},
          {"placed_bytes", r.placed_bytes},
          {"converted_tensors", r.converted_tensors},
          {"decoded_tensors", r.decoded_tensors},
          {"mode", std::string(scheduler::load_mode_name(r.mode))},
          {"engine", r.engine},
          {"tensors", r.tensors},
          {"bytes", r.tensor_bytes},
          {"read_bytes", r.read_bytes},
          {"shared_in_place_bytes", r.shared_in_place_bytes},
          {"shared_received_bytes", r.shared_received_bytes},
          {"chunks", r.chunks},
          {"seconds", r.seconds},
          {"gbps", r.gb_per_s},
          {"peak_rss_bytes", rss},
          {"staging_budget_bytes", r.staging_budget_bytes},
          {"peak_staging_bytes", r.peak_staging_bytes},
          {"stages", stages}};
}

struct WorldTotals {
  std::uint64_t read_bytes = 0;
  std::uint64_t tensor_bytes = 0;
  double seconds = 0;  // of the slowest rank
};

}  // namespace

// The request planned, with its lock applied.
Result<PlannedLoad> prepare(const LoadArgs& args, Result<LoadRequest> request) {
  if (!request) return fail(std::move(request.error()));
  QLOAD_ASSIGN_OR_RETURN(PlannedLoad planned, plan_request(std::move(*request)));
  QLOAD_ASSIGN_OR_RETURN(const std::string locked, lock_path(args, planned.request));
  if (!locked.empty()) QLOAD_TRY(apply_lock(locked, planned));
  return planned;
}

int run_load(const LoadArgs& args) {
  // A multi-process load: the ranks meet first, so a rank that cannot even plan its load stops
  // the others at once, and they agree on the load before anything is read; afterwards each
  // learns whether every other rank succeeded (if one failed, all fail).
  const auto environment = world_from_env(std::getenv);
  if (!environment) return report(environment.error());
  auto request = build_request(args);
  std::optional<Rendezvous> rendezvous;
  if (*environment) {
    // A rank whose request is bad still joins (with the default timeout), so that it can tell
    // the others at once instead of leaving them waiting.
    const auto timeout = request ? request->settings.values().rendezvous_timeout : Settings{}.rendezvous_timeout;
    auto joined = Rendezvous::join(**environment, timeout);
    if (!joined) return report(joined.error());
    rendezvous = std::move(*joined);
  }
  auto planned = prepare(args, std::move(request));
  if (rendezvous)
    if (Status agreed = agree_on_load(*rendezvous, planned); !agreed) return report(agreed.error());
  if (!planned) return report(planned.error());
  LoadRequest* req = &planned->request;
  std::string trace_path = args.trace;
  if (trace_path.empty() && req->recipe && req->recipe->trace) trace_path = *req->recipe->trace;
  TraceRecorder trace;
  if (!trace_path.empty()) req->options.trace = &trace;
  const bool json = args.json || (req->recipe && req->recipe->json_report);
  ProgressBar bar(!json && ::isatty(STDERR_FILENO));
  req->options.progress = [&bar](std::uint64_t done, std::uint64_t total) { bar.update(done, total); };

  // Shared reads: tensors other ranks read arrive through a communicator (NCCL for GPUs).
  std::optional<Communicator> communicator;
  if (rendezvous && req->options.plan.parallel.share_reads) {
    std::vector<int> gpu_slots;
    for (const Device& d : req->options.plan.devices) gpu_slots.push_back(d.is_cuda() ? d.index : -1);
    auto made = Communicator::create(*rendezvous, gpu_slots);
    if (!made) return report(made.error());
    communicator = std::move(*made);
    req->options.communicator = &*communicator;
  }
  auto model = scheduler::load(planned->catalog, planned->plan, req->options);
  bar.finish();
  std::vector<RankOutcome> outcomes;
  if (rendezvous) {
    RankOutcome mine{.ok = model.has_value(), .error = model ? "" : model.error().to_string()};
    if (model) {
      mine.read_bytes = model->report().read_bytes;
      mine.tensor_bytes = model->report().tensor_bytes;
      mine.seconds = model->report().seconds;
    }
    auto shared = share_outcome(*rendezvous, mine);
    if (model && !shared) return report(shared.error());  // the model is released on return
    if (shared) outcomes = std::move(*shared);
  }
  if (!model) return report(model.error());
  if (!trace_path.empty())
    if (Status s = trace.write(trace_path); !s) return report(s.error());
  if (!args.dump.empty())
    if (Status s = dump(*model, args.dump, req->world ? fmt::format("rank{}.", req->world->rank) : ""); !s)
      return report(s.error());

  const scheduler::LoadReport& r = model->report();
  const std::uint64_t rss = peak_rss_bytes();
  // The world's totals, from rank 0 (every rank knows them; one prints them).
  WorldTotals totals;
  for (const RankOutcome& o : outcomes) {
    totals.read_bytes += o.read_bytes;
    totals.tensor_bytes += o.tensor_bytes;
    totals.seconds = std::max(totals.seconds, o.seconds);
  }
  if (json) {
    nlohmann::json out = report_json(r, req->devices, rss);
    if (req->world) {
      out["rank"] = req->world->rank;
      out["world_size"] = req->world->size;
      out["world"] = {{"read_bytes", totals.read_bytes}, {"bytes", totals.tensor_bytes}, {"seconds", totals.seconds}};
    }
    fmt::print("{}\n", out.dump(2));
  } else {
    fmt::print("{}", r.summary());
    fmt::print("peak RSS {}\n", format_bytes(rss));
    // The stable line operators grep for.
    fmt::print("qload: loaded {} ({} tensors) in {:.2f} s ({:.2f} GB/s) to {}; peak RSS {}\n",
               format_bytes(r.tensor_bytes), r.tensors, r.seconds, r.gb_per_s, req->devices, format_bytes(rss));
    if (req->world && req->world->rank == 0)
      fmt::print("qload: {} processes read {} ({} of tensor data) in {:.2f} s\n", req->world->size,
                 format_bytes(totals.read_bytes), format_bytes(totals.tensor_bytes), totals.seconds);
  }
  return 0;
}

}  // namespace qload::cli

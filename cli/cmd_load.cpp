// `qload load PATH|RECIPE.lua`: runs a load and reports it; optionally traces it and dumps
// what was loaded as safetensors so other tools can check the bytes.
#include <sys/resource.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "progress_bar.hpp"
#include "qload/runtime/units.hpp"
#include "qload/session/load.hpp"
#include "qload/session/report.hpp"
#include "qload/session/spec_fields.hpp"
#include "qload/session/write.hpp"

namespace qload::cli {
namespace {

std::uint64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

// The session's report (docs/cli.md), with what only the CLI knows: the devices it was given and
// the process's peak RSS.
nlohmann::json report_json(const scheduler::LoadReport& r, const std::string& devices, std::uint64_t rss) {
  nlohmann::json out = session::load_report_json(r);
  out["device"] = devices;
  out["peak_rss_bytes"] = rss;
  return out;
}

nlohmann::json world_json(const session::WorldTotals& totals) {
  nlohmann::json nodes = nlohmann::json::array(), ranks = nlohmann::json::array();
  for (const session::NodeTotals& n : totals.nodes)
    nodes.push_back({{"first_rank", n.first_rank},
                     {"ranks", n.ranks},
                     {"read_bytes", n.read_bytes},
                     {"tensor_read_bytes", n.tensor_bytes}});
  for (const session::RankTotals& r : totals.ranks)
    ranks.push_back({{"node", r.node},
                     {"read_bytes", r.read_bytes},
                     {"tensor_read_bytes", r.tensor_bytes},
                     {"received_bytes", r.received_bytes},
                     {"seconds", r.seconds}});
  return {{"read_bytes", totals.read_bytes},
          {"tensor_bytes", totals.tensor_bytes},
          {"checkpoint_tensor_bytes", totals.checkpoint_tensor_bytes},
          {"seconds", totals.seconds},
          {"nodes", nodes},
          {"ranks", ranks}};
}

}  // namespace

session::SpecNames flag_names() {
  return session::spec_names(session::SpecClient::kCli);
}

Result<session::LoadSpec> load_spec(const LoadArgs& args) {
  session::LoadSpec spec = args.spec;
  spec.names = flag_names();
  if (args.mmap) spec.settings.push_back({"load_mode", "mmap", "--mmap"});
  if (args.no_digests) spec.settings.push_back({"digests", "off", "--no-digests"});
  QLOAD_ASSIGN_OR_RETURN(std::vector<session::SettingFlag> set, session::parse_setting_assignments(args.set, "--set"));
  for (session::SettingFlag& f : set) spec.settings.push_back(std::move(f));
  return spec;
}

Result<session::LoadRequest> load_request(const LoadArgs& args) {
  QLOAD_ASSIGN_OR_RETURN(const session::LoadSpec spec, load_spec(args));
  return session::build_request(spec, Logger::to_stderr(LogLevel::kWarn));
}

int run_load(const LoadArgs& args) {
  auto spec = load_spec(args);
  if (!spec) return report(spec.error());
  const bool json = args.json;
  ProgressBar bar(!json && ::isatty(STDERR_FILENO));
  // --stream: what a server's loader does with each tensor is its own; here nothing, so the
  // report's times are the loader's alone.
  scheduler::LoadContext::TensorCallback take;
  if (args.stream)
    take = [](std::uint32_t, const scheduler::DeviceTensor&, const std::shared_ptr<const void>&) { return Status{}; };
  auto loaded = session::load(
      *spec, Logger::to_stderr(LogLevel::kWarn),
      {.progress = [&bar](std::uint64_t done, std::uint64_t total) { bar.update(done, total); }, .on_tensor = take});
  bar.finish();
  if (!loaded) return report(loaded.error());
  const session::LoadRequest& req = loaded->request;
  const scheduler::Model& model = loaded->model;
  if (!args.dump.empty())
    if (Status s = session::dump(model, args.dump, req.world ? fmt::format("rank{}.", req.world->rank) : ""); !s)
      return report(s.error());

  const scheduler::LoadReport& r = model.report();
  const std::uint64_t rss = peak_rss_bytes();
  const session::WorldTotals totals = loaded->world.value_or(session::WorldTotals{});
  if (json || (req.recipe && req.recipe->json_report)) {
    nlohmann::json out = report_json(r, req.devices, rss);
    if (req.world) {
      out["rank"] = req.world->rank;
      out["world_size"] = req.world->size;
      out["world"] = world_json(totals);
    }
    fmt::print("{}\n", out.dump(2));
  } else {
    fmt::print("{}", r.summary());
    fmt::print("peak RSS {}\n", format_bytes(rss));
    // The stable line operators grep for.
    fmt::print("qload: loaded {} ({} tensors) in {:.2f} s ({:.2f} GB/s) to {}; peak RSS {}\n",
               format_bytes(r.tensor_bytes), r.tensors, r.seconds, r.gb_per_s, req.devices, format_bytes(rss));
    if (req.world && req.world->rank == 0) {
      fmt::print("qload: {} processes read {} ({} of tensor data) in {:.2f} s\n", req.world->size,
                 format_bytes(totals.read_bytes), format_bytes(totals.tensor_bytes), totals.seconds);
      for (const session::NodeTotals& node : totals.nodes)
        fmt::print("qload: node of ranks {}..{} read {} of the checkpoint's {} of tensor data\n", node.first_rank,
                   node.first_rank + node.ranks - 1, format_bytes(node.tensor_bytes),
                   format_bytes(totals.checkpoint_tensor_bytes));
    }
  }
  return 0;
}

}  // namespace qload::cli

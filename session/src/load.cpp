#include "qload/session/load.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include <fmt/format.h>

#include "qload/distributed/communicator.hpp"
#include "qload/distributed/rendezvous.hpp"
#include "qload/runtime/trace.hpp"
#include "qload/session/world_load.hpp"

namespace qload::session {

namespace {

WorldTotals world_totals(const std::vector<RankOutcome>& outcomes, const formats::Catalog& catalog) {
  WorldTotals totals;
  for (const formats::TensorEntry& t : catalog.tensors) totals.checkpoint_tensor_bytes += t.nbytes;
  for (const RankOutcome& o : outcomes) {
    totals.read_bytes += o.read_bytes;
    totals.tensor_bytes += o.tensor_bytes;
    totals.seconds = std::max(totals.seconds, o.seconds);
    totals.ranks.push_back({.node = o.node,
                            .read_bytes = o.read_bytes,
                            .tensor_bytes = o.tensor_bytes,
                            .received_bytes = o.received_bytes,
                            .seconds = o.seconds});
    auto node = std::ranges::find(totals.nodes, o.node, &NodeTotals::first_rank);
    if (node == totals.nodes.end()) node = totals.nodes.insert(totals.nodes.end(), NodeTotals{.first_rank = o.node});
    ++node->ranks;
    node->read_bytes += o.read_bytes;
    node->tensor_bytes += o.tensor_bytes;
  }
  std::ranges::sort(totals.nodes, {}, &NodeTotals::first_rank);
  return totals;
}

// `world`: the processes of the load, known even when the request failed (so that the failing
// rank still meets the others to tell them).
Result<LoadOutcome> load_in(const std::optional<distributed::World>& world, Result<LoadRequest> request,
                            const LoadHooks& hooks, const Logger& log) {
  // A multi-process load: the ranks meet first, so a rank that cannot even plan its load stops
  // the others at once, and they agree on the load before anything is read; afterwards each
  // learns whether every other rank succeeded (if one failed, all fail).
  std::optional<distributed::Rendezvous> rendezvous;
  if (world) {
    // A rank whose request is bad still joins (with the default timeout), so that it can tell
    // the others at once instead of leaving them waiting.
    auto timeout = Settings{}.rendezvous_timeout;
    if (request) {
      timeout = request->settings.values().rendezvous_timeout;
    } else {
      if (auto env = resolve_settings(nullptr, {}, Logger{})) timeout = env->values().rendezvous_timeout;
      // Said now: the others may be long in coming (or, started alone, never come).
      log.warn(fmt::format("rank {} of {} cannot load: {}; it meets the other ranks to tell them, waiting up to {} s",
                           world->rank, world->size, request.error().to_string(),
                           std::chrono::duration_cast<std::chrono::seconds>(timeout).count()));
    }
    auto joined = distributed::Rendezvous::join(*world, timeout, request ? request->options.log : log);
    if (!joined) return fail(std::move(request ? joined.error() : request.error()));  // its own error first
    rendezvous = std::move(*joined);
  }
  Result<PlannedLoad> planned = request ? prepare(std::move(*request)) : fail(std::move(request.error()));
  if (rendezvous) QLOAD_TRY(agree_on_load(*rendezvous, planned));
  if (!planned) return fail(std::move(planned.error()));
  if (rendezvous) QLOAD_TRY(unshare_cached_reads(*rendezvous, *planned, planned->request.options.log));
  LoadRequest& req = planned->request;
  TraceRecorder trace;
  scheduler::LoadContext context{.trace = req.trace.empty() ? nullptr : &trace,
                                 .progress = hooks.progress,
                                 .on_tensor = hooks.on_tensor,
                                 .stop = hooks.stop};

  // Shared reads: tensors other ranks read arrive through a communicator (NCCL for GPUs).
  std::optional<distributed::Communicator> communicator;
  if (rendezvous && req.options.plan.parallel.share_reads) {
    std::vector<int> gpu_slots;
    for (const Device& d : req.options.plan.devices) gpu_slots.push_back(d.is_cuda() ? d.index : -1);
    QLOAD_ASSIGN_OR_RETURN(communicator,
                           distributed::Communicator::create(*rendezvous, gpu_slots,
                                                             {.nccl = req.settings.values().nccl_timeout,
                                                              .straggler = req.settings.values().straggler_timeout},
                                                             req.nccl_comms));
    context.communicator = &*communicator;
  }
  Result<scheduler::Model> model = scheduler::load(planned->catalog, planned->plan, req.options, context);
  std::optional<WorldTotals> totals;
  if (rendezvous) {
    RankOutcome mine{.ok = model.has_value(),
                     .error = model ? "" : model.error().to_string(),
                     .node = world->rank - world->local_rank};
    if (model) {
      const scheduler::LoadReport& report = model->report();
      mine.read_bytes = report.read_bytes;
      mine.tensor_bytes = report.tensor_bytes;
      mine.received_bytes = report.shared_received_bytes;
      mine.seconds = report.seconds;
    }
    Result<std::vector<RankOutcome>> outcomes =
        share_outcome(*rendezvous, mine, req.settings.values().straggler_timeout);
    // Another rank failed: this one's model is released on return. This rank failed: its own
    // error is the one to report.
    if (model && !outcomes) return fail(std::move(outcomes.error()));
    if (outcomes) totals = world_totals(*outcomes, planned->catalog);
  }
  if (!model) return fail(std::move(model.error()));
  if (!req.trace.empty()) QLOAD_TRY(trace.write(req.trace, req.trace_overwrite));
  return LoadOutcome{.request = std::move(req), .model = std::move(*model), .world = totals};
}

}  // namespace

Result<LoadOutcome> load(const LoadSpec& spec, const Logger& log, const LoadHooks& hooks) {
  QLOAD_ASSIGN_OR_RETURN(const std::optional<distributed::World> world, world_of(spec));
  return load_in(world, build_request(spec, log), hooks, log);
}

Result<LoadOutcome> load(Result<LoadRequest> request, const LoadHooks& hooks) {
  if (request) {
    const std::optional<distributed::World> world = request->world;
    const Logger log = request->options.log;  // a copy: the request moves into load_in
    return load_in(world, std::move(request), hooks, log);
  }
  QLOAD_ASSIGN_OR_RETURN(const std::optional<distributed::World> world, distributed::world_from_env(std::getenv));
  return load_in(world, std::move(request), hooks, Logger{});
}

}  // namespace qload::session

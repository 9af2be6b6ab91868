// A whole load, as every client runs it: spec -> request (recipe, settings) -> plan -> lock
// check -> load -> model. In a multi-process load (WORLD_SIZE > 1, docs/parallel.md) the ranks
// meet first, agree on the load before anything is read, share reads when asked to, and learn
// each other's outcome afterwards, so that either every rank has its model or every rank fails.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <stop_token>
#include <vector>

#include "qload/runtime/error.hpp"
#include "qload/runtime/log.hpp"
#include "qload/scheduler/model.hpp"
#include "qload/session/request.hpp"

namespace qload::session {

struct LoadHooks {
  // Bytes read so far and the total to read, on the loading thread after each read; quick.
  std::function<void(std::uint64_t done_bytes, std::uint64_t total_bytes)> progress;
  // Streaming: each tensor as soon as it is complete (scheduler::LoadContext::on_tensor).
  scheduler::LoadContext::TensorCallback on_tensor;
  // Cancels the load from another thread (scheduler::LoadContext::stop): it then fails with
  // kCancelled once what is running has finished, everything released.
  std::stop_token stop;
};

// A multi-process load's totals over every rank, per node and per rank: with shared reads, a
// node's stored tensor bytes read equal the checkpoint's (each byte read once per node), and
// each rank's received bytes are what other ranks read for it.
struct RankTotals {
  std::uint32_t node = 0;  // the node's first rank
  std::uint64_t read_bytes = 0;
  std::uint64_t tensor_bytes = 0;  // stored tensor bytes it read
  std::uint64_t received_bytes = 0;
  double seconds = 0;
};
struct NodeTotals {
  std::uint32_t first_rank = 0;
  std::uint32_t ranks = 0;
  std::uint64_t read_bytes = 0;
  std::uint64_t tensor_bytes = 0;  // stored tensor bytes its ranks read
};
struct WorldTotals {
  std::uint64_t read_bytes = 0;
  std::uint64_t tensor_bytes = 0;
  std::uint64_t checkpoint_tensor_bytes = 0;  // every tensor of the checkpoint, as stored
  double seconds = 0;                         // of the slowest rank
  std::vector<NodeTotals> nodes;              // by first rank
  std::vector<RankTotals> ranks;              // by rank
};

struct LoadOutcome {
  LoadRequest request;  // what was loaded and how: source, recipe, settings, world
  scheduler::Model model;
  std::optional<WorldTotals> world;  // set in a multi-process load
};

// Runs the load `spec` describes. On error nothing is left loaded: arenas, staging, files and
// threads are released before it returns. The request's trace (spec or recipe) is written
// after a successful load.
Result<LoadOutcome> load(const LoadSpec& spec, const Logger& log, const LoadHooks& hooks = {});
// The same from a request built earlier (build_request), or the error building it failed with
// (a rank of a multi-process load still meets the others to tell them).
Result<LoadOutcome> load(Result<LoadRequest> request, const LoadHooks& hooks = {});

}  // namespace qload::session

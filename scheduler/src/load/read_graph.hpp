// The read-mode task graph: per chunk, read -> (verify, place, h2d). `place` delivers the
// chunk's pieces bound for host arenas (memcpy or CPU conversion) on a CPU worker; `h2d`, one
// per GPU the chunk feeds, copies its pieces there on one of that GPU's copy lanes (and
// converts them with a kernel). Staged chunks hold a staging slot from their read's start
// until every consumer is done, so a slot is reused only after its copies have completed;
// direct chunks read straight into a host arena and are only verified. Verify tasks of a
// tensor spanning several chunks are chained so its XXH3 streams over the chunks in file
// order.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "exec/arena_target.hpp"
#include "load/tensor_digests.hpp"
#include "qload/formats/catalog.hpp"
#include "qload/io/digest.hpp"
#include "qload/io/reader.hpp"
#include "qload/scheduler/plan.hpp"
#include "qload/scheduler/staging_pool.hpp"
#include "qload/scheduler/task_graph.hpp"

namespace qload::scheduler::detail {

struct ReadBudgets {
  std::uint32_t reads_in_flight = 1;
  std::uint32_t cpu_workers = 1;
  std::uint32_t copy_lanes = 1;  // per GPU target: h2d tasks at once
  bool compute_digests = true;
};

// What the tasks share. Lives (at a fixed address) until the graph has run.
struct ReadLoadState {
  const formats::Catalog& catalog;
  const Plan& plan;
  StagingPool& pool;
  const std::vector<std::unique_ptr<ArenaTarget>>& targets;  // per plan arena
  const ExpectedDigests& expected;
  std::vector<StagingLease> leases;                      // per chunk, held from its read to its last consumer
  std::vector<std::unique_ptr<io::Xxh3Stream>> streams;  // per tensor spanning several chunks
  std::vector<std::uint64_t> digests;                    // per tensor, complete once the graph has run
};

struct TensorStream;   // stream_tasks.hpp
class SharedExchange;  // shared_exchange.hpp

// Builds the graph over `state`; zero-byte tensors get their digest (and its check) here.
// With `stream`, each tensor of the model is handed to its callback once complete; with
// `exchange` (shared reads), each tensor this process reads for others is sent once in place.
Result<TaskGraph> build_read_graph(ReadLoadState& state, const ReadBudgets& budgets, TensorStream* stream = nullptr,
                                   SharedExchange* exchange = nullptr);

}  // namespace qload::scheduler::detail

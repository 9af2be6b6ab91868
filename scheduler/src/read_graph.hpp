// The read-mode task graph: per chunk, read -> (verify, place). Staged chunks hold a staging
// slot from their read's start until both consumers are done; direct chunks read straight
// into the arena and are only verified. Verify tasks of a tensor spanning several chunks are
// chained so its XXH3 streams over the chunks in file order.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "qload/formats/catalog.hpp"
#include "qload/io/digest.hpp"
#include "qload/io/reader.hpp"
#include "qload/scheduler/plan.hpp"
#include "qload/scheduler/staging_pool.hpp"
#include "qload/scheduler/task_graph.hpp"
#include "tensor_digests.hpp"

namespace qload::scheduler::detail {

struct ReadBudgets {
  std::uint32_t reads_in_flight = 1;
  std::uint32_t cpu_workers = 1;
  bool compute_digests = true;
};

// What the tasks share. Lives (at a fixed address) until the graph has run.
struct ReadLoadState {
  const formats::Catalog& catalog;
  const Plan& plan;
  StagingPool& pool;
  std::byte* arena;  // the cpu arena (plan.arenas[0])
  const ExpectedDigests& expected;
  std::vector<StagingLease> leases;                      // per chunk, held from its read to its last consumer
  std::vector<std::unique_ptr<io::Xxh3Stream>> streams;  // per tensor spanning several chunks
  std::vector<std::uint64_t> digests;                    // per tensor, complete once the graph has run
};

// Builds the graph over `state`; zero-byte tensors get their digest (and its check) here.
Result<TaskGraph> build_read_graph(ReadLoadState& state, const ReadBudgets& budgets);

}  // namespace qload::scheduler::detail

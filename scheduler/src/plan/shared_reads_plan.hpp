// Which process reads what when the processes of a multi-process load share their reads
// (ParallelLayout::share_reads).
#pragma once

#include <cstdint>
#include <vector>

#include "plan/plan_arith.hpp"
#include "qload/formats/catalog.hpp"
#include "qload/scheduler/plan.hpp"

namespace qload::scheduler::detail {

// Whether shared reads go through a relay (SharedReads::kRelay): processes that do not hold
// whole replicas.
bool relays(const PlanOptions& options);

// Records every process's copies of tensor i (placed in `dtype`, split as `slices`) in
// Plan::copies.relayed; assign_relay_readers then picks its reader.
Status list_copies(std::uint32_t i, std::uint32_t stage, DType dtype, const std::vector<ShardSlice>& slices,
                   const PlanOptions& options, Plan& plan);

// SharedReads::kBroadcast: the reader of every tensor.
void assign_readers(const formats::Catalog& catalog, const std::vector<std::uint32_t>& order, const ParallelLayout& par,
                    Plan& plan);

// SharedReads::kRelay: the reader of every tensor several processes hold, and where it keeps
// it; returns the bytes of this process's relay arena.
Result<std::uint64_t> assign_relay_readers(const formats::Catalog& catalog, const PlanOptions& options, Plan& plan);

}  // namespace qload::scheduler::detail

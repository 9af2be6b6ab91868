// Which process reads what when the processes of a multi-process load share their reads
// (ParallelLayout::share_reads): every process computes the same answer from the same plan.
#include <algorithm>

#include "plan/shared_reads_plan.hpp"

namespace qload::scheduler::detail {

// Shared reads: every process holds whole replicas, so every tensor is everywhere; each is read
// by the process that has read the fewest bytes so far (in file order, lowest rank on a tie),
// which every process computes alike.
void assign_readers(const formats::Catalog& catalog, const std::vector<std::uint32_t>& order, const ParallelLayout& par,
                    Plan& plan) {
  std::vector<std::uint64_t> assigned(par.processes, 0);
  for (const std::uint32_t i : order) {
    const auto least = static_cast<std::uint32_t>(std::ranges::min_element(assigned) - assigned.begin());
    assigned[least] += catalog.tensors[i].nbytes;
    TensorPlacement& placed = plan.layout.tensors[i];
    placed.reader = least;
    placed.received = least != par.process;
    if (!placed.received) continue;
    placed.partial = false;
    plan.reads.direct_tensors -= placed.direct ? 1 : 0;
    placed.direct = false;
  }
}

// Relayed shared reads: each tensor held by several processes is read by the holder that has
// read the fewest bytes so far (file order, lowest rank on a tie), which cuts the other holders'
// copies into its relay arena as it reads; a tensor only one process holds is its own (and may
// be read in part). Every process computes the same. Returns the bytes of this process's relay
// arena.
Result<std::uint64_t> assign_relay_readers(const formats::Catalog& catalog, const PlanOptions& options, Plan& plan) {
  const ParallelLayout& par = options.parallel;
  std::vector<std::uint64_t> assigned(par.processes, 0);
  std::vector<std::uint64_t> relay_cursor(par.processes, 0);
  std::vector<RelayedTensor> kept;
  for (RelayedTensor& relayed : plan.copies.relayed) {  // in file order (place_in_arenas)
    std::vector<bool> holds(par.processes, false);
    for (const RelayedTensor::Copy& copy : relayed.copies) holds[copy.process] = true;
    if (std::ranges::count(holds, true) < 2) {  // its one holder reads it
      plan.layout.tensors[relayed.tensor].reader =
          static_cast<std::uint32_t>(std::ranges::find(holds, true) - holds.begin());
      continue;
    }
    std::uint32_t reader = par.processes;
    for (std::uint32_t q = 0; q < par.processes; ++q)
      if (holds[q] && (reader == par.processes || assigned[q] < assigned[reader])) reader = q;
    const formats::TensorEntry& t = catalog.tensors[relayed.tensor];
    assigned[reader] += t.nbytes;
    relayed.reader = reader;
    std::erase_if(relayed.copies, [&](const RelayedTensor::Copy& copy) { return copy.process == reader; });
    relayed.bytes_to.assign(par.processes, 0);
    for (RelayedTensor::Copy& copy : relayed.copies) {
      relayed.bytes_to[copy.process] += copy.bytes;
      auto offset = take(relay_cursor[reader], copy.bytes, options.tensor_alignment, "relay");
      if (!offset) return fail(tensor_error(catalog, t, Errc::kOverflow, offset.error().message()));
      copy.offset = *offset;
    }
    TensorPlacement& placed = plan.layout.tensors[relayed.tensor];
    placed.reader = reader;
    if (holds[par.process]) {
      plan.reads.direct_tensors -= placed.direct ? 1 : 0;
      placed.direct = false;
      placed.partial = false;
      placed.received = reader != par.process;
      placed.relayed = reader == par.process;
      placed.relay_index = static_cast<std::uint32_t>(kept.size());
    }
    kept.push_back(std::move(relayed));
  }
  plan.copies.relayed = std::move(kept);
  return relay_cursor[par.process];
}

// Shared reads between processes that do not hold whole replicas go through a relay
// (SharedReads::kRelay).
bool relays(const PlanOptions& options) {
  const ParallelLayout& par = options.parallel;
  return par.share_reads && options.devices.size() % (par.tensor * par.pipeline) != 0;
}

// Every process's copies of tensor i (a RelayedTensor whose reader is chosen later, by
// assign_relay_readers), in each process's shard order (replica, then tensor rank).
Status list_copies(std::uint32_t i, std::uint32_t stage, DType dtype, const std::vector<ShardSlice>& slices,
                   const PlanOptions& options, Plan& plan) {
  const ParallelLayout& par = options.parallel;
  const auto held = static_cast<std::uint32_t>(options.devices.size());
  RelayedTensor& relayed = plan.copies.relayed.emplace_back(RelayedTensor{.tensor = i, .dtype = dtype});
  for (std::uint32_t d = 0; d < par.data; ++d)
    for (std::uint32_t r = 0; r < par.tensor; ++r) {
      QLOAD_ASSIGN_OR_RETURN(const std::uint64_t numel, slices[r].shape.numel());
      relayed.copies.push_back({.process = ((d * par.pipeline + stage) * par.tensor + r) / held,
                                .slice = slices[r],
                                .bytes = numel * dtype_info(dtype).block_bytes});
    }
  std::ranges::stable_sort(relayed.copies, {}, &RelayedTensor::Copy::process);
  return {};
}

}  // namespace qload::scheduler::detail

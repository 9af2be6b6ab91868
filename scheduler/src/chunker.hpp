// Read chunking: cuts the tensor bytes of a catalog into reads (see plan.hpp for the rules).
#pragma once

#include <cstdint>
#include <vector>

#include "qload/formats/catalog.hpp"
#include "qload/scheduler/plan.hpp"

namespace qload::scheduler::detail {

// `order` lists tensor indices in file order; `placements` says which are read directly (a
// sharded one straight into its `shards`, row range by row range). Every tensor was validated
// (inside its file, no overflow) before this is called.
std::vector<ReadChunk> make_chunks(const formats::Catalog& catalog, const std::vector<std::uint32_t>& order,
                                   const std::vector<TensorPlacement>& placements,
                                   const std::vector<ShardPlacement>& shards, const PlanOptions& options);

}  // namespace qload::scheduler::detail

// Read chunking: cuts the tensor bytes of a catalog into reads (see plan.hpp for the rules).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "qload/formats/catalog.hpp"
#include "qload/scheduler/plan.hpp"

namespace qload::scheduler::detail {

// Byte ranges [begin, end) of stored tensor `t` that `shards` (copies of it) take, in order,
// overlapping and touching ranges merged. A column shard takes the span from its first row's
// first column to its last row's last column, the bytes between its rows read too (as a gap
// inside a coalesced read would be), unless they exceed `max_gap_bytes` a row: then each row's
// columns are a range of their own (reads that coalescing would not join anyway).
std::vector<std::pair<std::uint64_t, std::uint64_t>> shard_ranges(const formats::TensorEntry& t,
                                                                  std::span<const ShardPlacement> shards,
                                                                  std::uint64_t max_gap_bytes);

// `order` lists tensor indices in file order; `placements` says which are read directly (a
// sharded one straight into its `shards`, row range by row range) and which are read only in
// part (TensorPlacement::partial: the shard_ranges of its copies). Every tensor was validated
// (inside its file, no overflow) before this is called.
std::vector<ReadChunk> make_chunks(const formats::Catalog& catalog, const std::vector<std::uint32_t>& order,
                                   const std::vector<TensorPlacement>& placements,
                                   const std::vector<ShardPlacement>& shards, const PlanOptions& options);

}  // namespace qload::scheduler::detail

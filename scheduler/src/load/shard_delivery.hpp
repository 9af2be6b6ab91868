// How a staged piece of a stored tensor reaches its shards: the piece's bytes are cut into the
// runs each shard takes (whole row ranges when the shard keeps every column; for a column
// shard, one strided 2-D run per block of rows the piece holds whole, plus a run for a row it
// starts or ends inside), each copied (or converted) to its place in the shard.
#pragma once

#include <cstdint>
#include <vector>

#include "exec/arena_target.hpp"
#include "qload/formats/catalog.hpp"
#include "qload/scheduler/plan.hpp"

namespace qload::scheduler::detail {

// Appends the deliveries putting `piece` (at `stored` in host memory) into `shard`.
void shard_deliveries(const formats::TensorEntry& tensor, const ShardPlacement& shard, const ChunkPiece& piece,
                      const std::byte* stored, std::vector<Delivery>& out);

// Stored bytes of `piece` that `shard` takes, and in how many runs (deliveries, a 2-D one
// counting once).
struct ShardPieceSize {
  std::uint64_t bytes = 0;
  std::uint64_t runs = 0;
};
ShardPieceSize shard_piece_size(const formats::TensorEntry& tensor, const ShardPlacement& shard,
                                const ChunkPiece& piece);

}  // namespace qload::scheduler::detail

#include "shard_delivery.hpp"

#include <algorithm>

namespace qload::scheduler::detail {
namespace {

// Calls run(source offset in the piece, stored bytes, placed offset in the shard) for every
// contiguous run of `shard` inside `piece`. Pieces of converted tensors start and end on
// element boundaries (chunker), so placed offsets are exact.
template <typename Run>
void for_each_run(const formats::TensorEntry& t, const ShardPlacement& shard, const ChunkPiece& piece, Run run) {
  const ShardSlice& s = shard.slice;
  const std::uint64_t stored_element = dtype_info(t.dtype).block_bytes;
  const std::uint64_t placed_element = dtype_info(shard.dtype).block_bytes;
  const std::uint64_t dim0 = t.shape.rank() == 0 ? 1 : t.shape[0];
  const std::uint64_t row_bytes = dim0 == 0 ? 0 : t.nbytes / dim0;  // stored bytes of one row of the [dim0, rest] view
  const std::uint64_t width = s.col_end - s.col_begin;              // elements per shard row
  const std::uint64_t begin = piece.tensor_offset;
  const std::uint64_t end = piece.tensor_offset + piece.bytes;
  // Unconverted pieces may start inside an element: their offsets carry over byte for byte.
  const auto placed = [&](std::uint64_t stored_bytes) {
    return shard.dtype == t.dtype ? stored_bytes : stored_bytes / stored_element * placed_element;
  };
  const bool whole_rows = s.col_begin == 0 && s.col_end * stored_element == row_bytes;
  std::uint64_t shard_row = 0;  // the shard's row where the current range starts
  for (const auto& [first, last] : s.rows) {
    if (whole_rows) {
      // The range's rows are contiguous in the tensor and in the shard: one run.
      const std::uint64_t from = std::max(begin, first * row_bytes);
      const std::uint64_t to = std::min(end, last * row_bytes);
      if (from < to) run(from - begin, to - from, placed(shard_row * row_bytes + (from - first * row_bytes)));
    } else if (row_bytes > 0) {
      const std::uint64_t lo = std::max(first, begin / row_bytes);
      const std::uint64_t hi = std::min(last, (end + row_bytes - 1) / row_bytes);
      for (std::uint64_t r = lo; r < hi; ++r) {
        const std::uint64_t cols_start = r * row_bytes + s.col_begin * stored_element;
        const std::uint64_t from = std::max(begin, cols_start);
        const std::uint64_t to = std::min(end, r * row_bytes + s.col_end * stored_element);
        if (from < to)
          run(from - begin, to - from, placed((shard_row + r - first) * width * stored_element + (from - cols_start)));
      }
    }
    shard_row += last - first;
  }
}

}  // namespace

void shard_deliveries(const formats::TensorEntry& tensor, const ShardPlacement& shard, const ChunkPiece& piece,
                      const std::byte* stored, std::vector<Delivery>& out) {
  for_each_run(tensor, shard, piece, [&](std::uint64_t source, std::uint64_t bytes, std::uint64_t target) {
    out.push_back(Delivery{.stored = std::span(stored + source, static_cast<std::size_t>(bytes)),
                           .arena_offset = shard.offset + target,
                           .from = tensor.dtype,
                           .to = shard.dtype});
  });
}

ShardPieceSize shard_piece_size(const formats::TensorEntry& tensor, const ShardPlacement& shard,
                                const ChunkPiece& piece) {
  ShardPieceSize size;
  for_each_run(tensor, shard, piece, [&](std::uint64_t, std::uint64_t bytes, std::uint64_t) {
    size.bytes += bytes;
    ++size.runs;
  });
  return size;
}

}  // namespace qload::scheduler::detail

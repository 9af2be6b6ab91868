#include "load/shard_delivery.hpp"

#include <algorithm>

namespace qload::scheduler::detail {
namespace {

// Calls run(source offset in the piece, stored bytes, placed offset in the shard, rows, pitch)
// for every run of `shard` inside `piece`: a contiguous range (rows 1), or consecutive whole
// rows of a column shard (`rows` rows of `bytes` each, `pitch` apart in the piece, placed one
// after the other). Pieces of converted tensors start and end on element boundaries (chunker),
// so placed offsets are exact.
template <typename Run>
void for_each_run(const formats::TensorEntry& t, const ShardPlacement& shard, const ChunkPiece& piece, Run run) {
  const ShardSlice& s = shard.slice;
  const std::uint64_t stored_element = dtype_info(t.dtype).block_bytes;
  const std::uint64_t placed_element = dtype_info(shard.dtype).block_bytes;
  const std::uint64_t dim0 = view_row_count(t.shape, s);
  const std::uint64_t row_bytes = dim0 == 0 ? 0 : t.nbytes / dim0;  // stored bytes of one row of the [rows, rest] view
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
      if (from < to) run(from - begin, to - from, placed(shard_row * row_bytes + (from - first * row_bytes)), 1, 0);
    } else if (row_bytes > 0) {
      const std::uint64_t lo = std::max(first, begin / row_bytes);
      const std::uint64_t hi = std::min(last, (end + row_bytes - 1) / row_bytes);
      const std::uint64_t width_bytes = width * stored_element;
      std::uint64_t block_start = 0, block_rows = 0;  // consecutive rows the piece holds whole
      const auto flush = [&] {
        if (block_rows == 0) return;
        const std::uint64_t cols_start = block_start * row_bytes + s.col_begin * stored_element;
        run(cols_start - begin, width_bytes, placed((shard_row + block_start - first) * width_bytes), block_rows,
            row_bytes);
        block_rows = 0;
      };
      for (std::uint64_t r = lo; r < hi; ++r) {
        const std::uint64_t cols_start = r * row_bytes + s.col_begin * stored_element;
        const std::uint64_t from = std::max(begin, cols_start);
        const std::uint64_t to = std::min(end, cols_start + width_bytes);
        if (from == cols_start && to == cols_start + width_bytes) {  // the whole row of the shard
          if (block_rows == 0) block_start = r;
          ++block_rows;
          continue;
        }
        flush();  // a row the piece starts or ends inside
        if (from < to)
          run(from - begin, to - from, placed((shard_row + r - first) * width_bytes + (from - cols_start)), 1, 0);
      }
      flush();
    }
    shard_row += last - first;
  }
}

// A run of for_each_run as the arena takes it: with packed rows, one delivery at its placed
// offset; with a destination's row pitch (ShardPlacement::row_pitch), its placed bytes cut where
// the destination's rows end, each part at its row's place (a run of whole destination rows,
// the common case, as one 2-D delivery). Calls emit(source offset, stored bytes, arena offset
// from the shard's, rows, stored pitch, placed pitch).
template <typename Emit>
void place_run(const formats::TensorEntry& t, const ShardPlacement& shard, std::uint64_t source, std::uint64_t bytes,
               std::uint64_t target, std::uint64_t rows, std::uint64_t pitch, Emit emit) {
  if (shard.row_pitch == 0) {
    emit(source, bytes, target, rows, pitch, std::uint64_t{0});
    return;
  }
  const std::uint64_t stored_element = dtype_info(t.dtype).block_bytes;
  const std::uint64_t placed_element = dtype_info(shard.dtype).block_bytes;
  // Converted runs hold whole elements (chunker), so placed and stored offsets map exactly.
  const auto placed = [&](std::uint64_t b) { return t.dtype == shard.dtype ? b : b / stored_element * placed_element; };
  const auto stored = [&](std::uint64_t b) { return t.dtype == shard.dtype ? b : b / placed_element * stored_element; };
  const std::uint64_t width = shard.row_bytes();             // placed bytes of one destination row
  const std::uint64_t length = placed(bytes);                // placed bytes of each of the run's rows
  if (rows > 1 && length == width && target % width == 0) {  // a column shard's whole rows
    emit(source, bytes, target / width * shard.row_pitch, rows, pitch, shard.row_pitch);
    return;
  }
  if (rows == 1 && target % width == 0 && length % width == 0 && length > width) {  // whole rows of packed bytes
    emit(source, stored(width), target / width * shard.row_pitch, length / width, stored(width), shard.row_pitch);
    return;
  }
  for (std::uint64_t r = 0; r < rows; ++r)
    for (std::uint64_t done = 0; done < length;) {
      const std::uint64_t at = target + r * length + done;  // in the packed shard
      const std::uint64_t n = std::min(length - done, width - at % width);
      emit(source + r * pitch + stored(done), stored(n), at / width * shard.row_pitch + at % width, 1, 0,
           std::uint64_t{0});
      done += n;
    }
}

}  // namespace

void shard_deliveries(const formats::TensorEntry& tensor, const ShardPlacement& shard, const ChunkPiece& piece,
                      const std::byte* stored, std::vector<Delivery>& out) {
  if (!shard.slice.literal.empty()) {  // the plan's bytes, delivered with the tensor's first piece
    if (piece.tensor_offset == 0)
      out.push_back(Delivery{
          .stored = shard.slice.literal, .arena_offset = shard.offset, .from = shard.dtype, .to = shard.dtype});
    return;
  }
  for_each_run(
      tensor, shard, piece,
      [&](std::uint64_t source, std::uint64_t bytes, std::uint64_t target, std::uint64_t rows, std::uint64_t pitch) {
        place_run(tensor, shard, source, bytes, target, rows, pitch,
                  [&](std::uint64_t from, std::uint64_t n, std::uint64_t at, std::uint64_t count,
                      std::uint64_t stored_pitch, std::uint64_t placed_pitch) {
                    out.push_back(Delivery{.stored = std::span(stored + from, static_cast<std::size_t>(n)),
                                           .arena_offset = shard.offset + at,
                                           .from = tensor.dtype,
                                           .to = shard.dtype,
                                           .rows = count,
                                           .stored_pitch = stored_pitch,
                                           .placed_pitch = placed_pitch});
                  });
      });
}

ShardPieceSize shard_piece_size(const formats::TensorEntry& tensor, const ShardPlacement& shard,
                                const ChunkPiece& piece) {
  ShardPieceSize size;
  if (!shard.slice.literal.empty()) {
    if (piece.tensor_offset == 0) size = {.bytes = shard.slice.literal.size(), .runs = 1};
    return size;
  }
  for_each_run(
      tensor, shard, piece,
      [&](std::uint64_t source, std::uint64_t bytes, std::uint64_t target, std::uint64_t rows, std::uint64_t pitch) {
        size.bytes += bytes * rows;
        place_run(tensor, shard, source, bytes, target, rows, pitch,
                  [&](std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t) {
                    ++size.runs;
                  });
      });
  return size;
}

}  // namespace qload::scheduler::detail

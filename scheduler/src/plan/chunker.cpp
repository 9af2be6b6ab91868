#include "plan/chunker.hpp"

#include <algorithm>
#include <map>

namespace qload::scheduler::detail {
namespace {

// Builds staged chunks one at a time. Offsets here cannot overflow: every tensor lies inside
// its file (checked before), chunks never extend past the file, and chunk_bytes < 2^31.
class ChunkBuilder {
 public:
  ChunkBuilder(const formats::Catalog& catalog, const PlanOptions& options, std::vector<ReadChunk>& out)
      : catalog_(catalog), options_(options), out_(out) {}

  // Whether [offset, offset + bytes) of `file` can join the open chunk: when the gap to it is
  // at most max_gap_bytes, or when it costs no bytes: reads are rounded out to read_alignment,
  // so a chunk of its own would start at or before where this one's read ends (rows of a
  // column shard a few KiB apart would each read their whole neighbourhood).
  bool can_extend(std::uint32_t file, std::uint64_t offset, std::uint64_t bytes) const {
    if (!open_ || chunk_.file != file || offset < chunk_.file_offset) return false;
    const std::uint64_t align = options_.read_alignment;
    const bool free_gap = align > 1 && offset / align <= (data_end_ + align - 1) / align;
    if (offset > data_end_ && offset - data_end_ > options_.max_gap_bytes && !free_gap) return false;
    return offset + bytes - chunk_.file_offset <= options_.chunk_bytes;
  }

  // Opens a chunk for `want` bytes of data starting at `offset`. The read starts on a
  // read_alignment boundary, so O_DIRECT can take its body into an aligned slot, when the data
  // still fits, or always for data that spans chunks anyway (its later chunks then start
  // aligned too). Tiny chunks (under two alignment units) are never aligned.
  void open(std::uint32_t file, std::uint64_t offset, std::uint64_t want) {
    close();
    std::uint64_t start = offset;
    const std::uint64_t align = options_.read_alignment;
    if (align > 1 && options_.chunk_bytes >= 2 * align) {
      const std::uint64_t aligned = offset / align * align;
      if (want > options_.chunk_bytes || offset - aligned + want <= options_.chunk_bytes) start = aligned;
    }
    chunk_ = ReadChunk{.file = file, .file_offset = start};
    data_end_ = offset;
    open_ = true;
  }

  // Room left in the open chunk for data at `offset`.
  std::uint64_t room(std::uint64_t offset) const { return chunk_.file_offset + options_.chunk_bytes - offset; }

  void add(std::uint32_t tensor, std::uint64_t offset, std::uint64_t tensor_offset, std::uint64_t bytes) {
    chunk_.pieces.push_back(ChunkPiece{
        .tensor = tensor, .chunk_offset = offset - chunk_.file_offset, .tensor_offset = tensor_offset, .bytes = bytes});
    data_end_ = std::max(data_end_, offset + bytes);
  }

  // Ends the open chunk; its read is rounded up to read_alignment where the file and the
  // chunk size allow (an aligned tail keeps O_DIRECT going to the end).
  void close() {
    if (!open_) return;
    open_ = false;
    const std::uint64_t align = options_.read_alignment;
    const std::uint64_t limit = std::min(catalog_.files[chunk_.file].size, chunk_.file_offset + options_.chunk_bytes);
    std::uint64_t end = data_end_;
    if (align > 1 && end % align != 0 && end / align * align + align <= limit) end = end / align * align + align;
    chunk_.bytes = end - chunk_.file_offset;
    out_.push_back(std::move(chunk_));
  }

 private:
  const formats::Catalog& catalog_;
  const PlanOptions& options_;
  std::vector<ReadChunk>& out_;
  ReadChunk chunk_;
  std::uint64_t data_end_ = 0;  // end of the last tensor byte in the open chunk
  bool open_ = false;
};

// A tensor read straight into its arena slot: pieces of up to chunk_bytes, so hashing can
// follow the reads and several reads can be in flight.
void add_direct(const formats::TensorEntry& t, std::uint32_t index, std::uint64_t chunk_bytes,
                std::vector<ReadChunk>& out) {
  for (std::uint64_t done = 0; done < t.nbytes;) {
    const std::uint64_t n = std::min(chunk_bytes, t.nbytes - done);
    out.push_back(
        ReadChunk{.file = t.file,
                  .file_offset = t.offset + done,
                  .bytes = n,
                  .direct = true,
                  .pieces = {ChunkPiece{.tensor = index, .chunk_offset = 0, .tensor_offset = done, .bytes = n}}});
    done += n;
  }
}

// A tensor split by whole rows, each byte in exactly one shard, read straight into its
// shards: each shard's row ranges, in file order (so hashing follows the reads), in pieces of
// up to chunk_bytes.
void add_direct_shards(const formats::TensorEntry& t, std::uint32_t index, const TensorPlacement& placed,
                       const std::vector<ShardPlacement>& shards, std::uint64_t chunk_bytes,
                       std::vector<ReadChunk>& out) {
  struct Range {
    std::uint64_t begin = 0;  // in the tensor
    std::uint64_t bytes = 0;
    std::uint32_t shard = 0;
    std::uint64_t shard_offset = 0;
  };
  std::vector<Range> ranges;
  for (std::uint32_t k = placed.first_shard; k < placed.first_shard + placed.shard_count; ++k) {
    const std::uint64_t row_bytes = t.nbytes / std::max<std::uint64_t>(1, view_row_count(t.shape, shards[k].slice));
    std::uint64_t at = 0;
    for (const auto& [first, last] : shards[k].slice.rows) {
      ranges.push_back({first * row_bytes, (last - first) * row_bytes, k, at});
      at += (last - first) * row_bytes;
    }
  }
  std::ranges::sort(ranges, {}, &Range::begin);
  for (const Range& r : ranges)
    for (std::uint64_t done = 0; done < r.bytes;) {
      const std::uint64_t n = std::min(chunk_bytes, r.bytes - done);
      out.push_back(ReadChunk{.file = t.file,
                              .file_offset = t.offset + r.begin + done,
                              .bytes = n,
                              .direct = true,
                              .pieces = {ChunkPiece{.tensor = index,
                                                    .chunk_offset = 0,
                                                    .tensor_offset = r.begin + done,
                                                    .bytes = n,
                                                    .shard = r.shard,
                                                    .shard_offset = r.shard_offset + done}}});
      done += n;
    }
}

// A span of a file-image arena (TensorPlacement::image): its tensors, read whole and straight
// into place in reads of up to chunk_bytes cut on aligned file offsets, the first rounded down
// and the last rounded up within the file (the layout keeps that padding free), so that with
// O_DIRECT only a span's last partial block goes through the page cache.
class SpanReads {
 public:
  SpanReads(const formats::Catalog& catalog, const PlanOptions& options, std::vector<ReadChunk>& out)
      : catalog_(catalog), options_(options), out_(out) {}

  void add(std::uint32_t tensor, const TensorPlacement& placed) {
    if (placed.starts_span) flush(members_[placed.region]);
    members_[placed.region].push_back(tensor);
  }

  void flush_all() {
    for (auto& [region, members] : members_) flush(region);
  }

  // Emits the open span of `region`, if any: a tensor placed there outside the span comes next
  // in the file, and the layout has ended the span before it, so reads stay in file order.
  void flush(std::uint32_t region) {
    const auto it = members_.find(region);
    if (it != members_.end()) flush(it->second);
  }

 private:
  void flush(std::vector<std::uint32_t>& members) {
    if (members.empty()) return;
    const formats::TensorEntry& first = catalog_.tensors[members.front()];
    const formats::TensorEntry& last = catalog_.tensors[members.back()];
    // Rounded out no further than the padding the layout keeps (kFileImageAlignment).
    const std::uint64_t align = std::clamp<std::uint64_t>(options_.read_alignment, 1, kFileImageAlignment);
    // Cut points: aligned file offsets, chunk_bytes apart (rounded down to the alignment when
    // a chunk is larger than one block).
    const std::uint64_t step =
        options_.chunk_bytes >= align ? options_.chunk_bytes / align * align : options_.chunk_bytes;
    const std::uint64_t begin = first.offset / align * align;
    const std::uint64_t data_end = last.offset + last.nbytes;
    const std::uint64_t end = std::min(catalog_.files[first.file].size, (data_end + align - 1) / align * align);
    std::size_t next = 0;  // the first member that may still overlap the next read
    for (std::uint64_t at = begin; at < end; at += step) {
      ReadChunk chunk{.file = first.file, .file_offset = at, .bytes = std::min(step, end - at), .direct = true};
      const std::uint64_t chunk_end = at + chunk.bytes;
      for (std::size_t k = next; k < members.size(); ++k) {
        const formats::TensorEntry& t = catalog_.tensors[members[k]];
        if (t.offset >= chunk_end) break;
        const std::uint64_t from = std::max(t.offset, at), to = std::min(t.offset + t.nbytes, chunk_end);
        if (from < to)
          chunk.pieces.push_back(ChunkPiece{
              .tensor = members[k], .chunk_offset = from - at, .tensor_offset = from - t.offset, .bytes = to - from});
        if (t.offset + t.nbytes <= chunk_end) next = k + 1;
      }
      // A read of gap bytes only (a gap wider than a read) carries nothing: skip it.
      if (!chunk.pieces.empty()) out_.push_back(std::move(chunk));
    }
    members.clear();
  }

  const formats::Catalog& catalog_;
  const PlanOptions& options_;
  std::vector<ReadChunk>& out_;
  std::map<std::uint32_t, std::vector<std::uint32_t>> members_;  // per region, in file order
};

}  // namespace

std::vector<std::pair<std::uint64_t, std::uint64_t>> shard_ranges(const formats::TensorEntry& t,
                                                                  std::span<const ShardPlacement> shards,
                                                                  std::uint64_t max_gap_bytes) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  const std::uint64_t element = dtype_info(t.dtype).block_bytes;
  for (const ShardPlacement& shard : shards) {
    const std::uint64_t row_bytes = t.nbytes / std::max<std::uint64_t>(1, view_row_count(t.shape, shard.slice));
    const std::uint64_t begin = shard.slice.col_begin * element, end = shard.slice.col_end * element;
    const bool row_by_row = row_bytes - (end - begin) > max_gap_bytes;
    for (const auto& [first, last] : shard.slice.rows) {
      if (first >= last || begin == end) continue;  // nothing of the tensor (an empty region)
      if (!row_by_row) {
        ranges.emplace_back(first * row_bytes + begin, (last - 1) * row_bytes + end);
        continue;
      }
      for (std::uint64_t row = first; row < last; ++row)
        ranges.emplace_back(row * row_bytes + begin, row * row_bytes + end);
    }
  }
  std::ranges::sort(ranges);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> merged;
  for (const auto& r : ranges) {
    if (!merged.empty() && r.first <= merged.back().second)
      merged.back().second = std::max(merged.back().second, r.second);
    else
      merged.push_back(r);
  }
  return merged;
}

std::vector<ReadChunk> make_chunks(const formats::Catalog& catalog, const std::vector<std::uint32_t>& order,
                                   const std::vector<TensorPlacement>& placements,
                                   const std::vector<ShardPlacement>& shards, const PlanOptions& options) {
  std::vector<ReadChunk> out;
  ChunkBuilder builder(catalog, options, out);
  SpanReads spans(catalog, options, out);
  for (const std::uint32_t i : order) {
    const formats::TensorEntry& t = catalog.tensors[i];
    if (t.nbytes == 0) continue;
    if (placements[i].direct && placements[i].image) {
      builder.close();  // staged data before the span is read before it
      spans.add(i, placements[i]);
      continue;
    }
    spans.flush(placements[i].region);
    if (placements[i].direct) {
      builder.close();
      if (placements[i].shard_count > 0) {
        add_direct_shards(t, i, placements[i], shards, options.chunk_bytes, out);
      } else {
        add_direct(t, i, options.chunk_bytes, out);
      }
      continue;
    }
    const TensorPlacement& placed = placements[i];
    if (placed.region == kNoRegion && placed.shard_count == 0) continue;  // another process's
    if (placed.received) continue;                                        // read by another process
    const std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges =
        placed.partial
            ? shard_ranges(t, std::span(shards).subspan(placed.first_shard, placed.shard_count), options.max_gap_bytes)
            : std::vector<std::pair<std::uint64_t, std::uint64_t>>{{0, t.nbytes}};
    // A converted tensor is cut at element boundaries so every piece converts alone (the room
    // is always at least 33 bytes: PlanOptions asks 64-byte chunks for conversion); a partial
    // range starts and ends on one (a row or a column boundary).
    const std::uint64_t unit = placed.dtype == t.dtype ? 1 : dtype_info(t.dtype).block_bytes;
    for (const auto& [begin, end] : ranges) {
      const std::uint64_t bytes = end - begin;
      if (bytes <= options.chunk_bytes) {
        // A range that fits a chunk is never split: it joins the open chunk or starts one.
        if (!builder.can_extend(t.file, t.offset + begin, bytes)) builder.open(t.file, t.offset + begin, bytes);
        builder.add(i, t.offset + begin, begin, bytes);
        continue;
      }
      // Larger than a chunk: spans fresh chunks; the last one stays open for what follows.
      for (std::uint64_t done = begin; done < end;) {
        builder.open(t.file, t.offset + done, end - done);
        std::uint64_t n = std::min(builder.room(t.offset + done), end - done);
        if (n < end - done) n = n / unit * unit;
        builder.add(i, t.offset + done, done, n);
        done += n;
      }
    }
  }
  builder.close();
  spans.flush_all();
  return out;
}

}  // namespace qload::scheduler::detail

#include "read_graph.hpp"

#include <cstring>

#include <fmt/format.h>

namespace qload::scheduler::detail {
namespace {

Result<io::ReadRequest> prepare_read(ReadLoadState& s, std::uint32_t index) {
  const ReadChunk& chunk = s.plan.chunks[index];
  std::byte* dest = nullptr;
  if (chunk.direct) {
    const ChunkPiece& piece = chunk.pieces.front();
    dest = s.arena + s.plan.tensors[piece.tensor].offset + piece.tensor_offset;
  } else {
    s.leases[index] = s.pool.try_lease();
    // The executor's staging budget equals the pool's capacity, so this cannot happen.
    if (!s.leases[index]) return fail(Errc::kInternal, "staging pool exhausted within the staging budget");
    dest = s.leases[index].bytes().data();
  }
  // The plan's chunks fit the host address space: each lies in a slot or in the arena.
  return io::ReadRequest{
      .file = chunk.file, .offset = chunk.file_offset, .dest = std::span(dest, static_cast<std::size_t>(chunk.bytes))};
}

// Where a piece's bytes are once its chunk has been read.
const std::byte* piece_bytes(const ReadLoadState& s, std::uint32_t index, const ChunkPiece& piece) {
  const ReadChunk& chunk = s.plan.chunks[index];
  if (chunk.direct) return s.arena + s.plan.tensors[piece.tensor].offset + piece.tensor_offset;
  return s.leases[index].bytes().data() + piece.chunk_offset;
}

Status place_chunk(ReadLoadState& s, std::uint32_t index) {
  for (const ChunkPiece& piece : s.plan.chunks[index].pieces)
    std::memcpy(s.arena + s.plan.tensors[piece.tensor].offset + piece.tensor_offset, piece_bytes(s, index, piece),
                static_cast<std::size_t>(piece.bytes));
  return {};
}

// Hashes each piece: a whole tensor at once, a tensor spanning chunks through its stream
// (the verify tasks of its chunks run in file order, chained by dependencies).
Status verify_chunk(ReadLoadState& s, std::uint32_t index) {
  for (const ChunkPiece& piece : s.plan.chunks[index].pieces) {
    const std::span bytes(piece_bytes(s, index, piece), static_cast<std::size_t>(piece.bytes));
    const std::uint64_t tensor_bytes = s.catalog.tensors[piece.tensor].nbytes;
    if (piece.tensor_offset == 0 && piece.bytes == tensor_bytes) {
      s.digests[piece.tensor] = io::xxh3_64(bytes);
    } else {
      auto& stream = s.streams[piece.tensor];
      if (piece.tensor_offset == 0) stream = std::make_unique<io::Xxh3Stream>();
      stream->update(bytes);
      if (piece.tensor_offset + piece.bytes < tensor_bytes) continue;
      s.digests[piece.tensor] = stream->digest64();
      stream.reset();
    }
    QLOAD_TRY(check_digest(s.catalog, piece.tensor, s.digests[piece.tensor], s.expected[piece.tensor]));
  }
  return {};
}

std::string chunk_name(const ReadLoadState& s, std::uint32_t index) {
  const ReadChunk& c = s.plan.chunks[index];
  if (c.direct) {
    const ChunkPiece& p = c.pieces.front();
    return fmt::format("{} +{}", s.catalog.tensors[p.tensor].name, p.tensor_offset);
  }
  return fmt::format("chunk {} ({} tensors)", index, c.pieces.size());
}

}  // namespace

Result<TaskGraph> build_read_graph(ReadLoadState& s, const ReadBudgets& budgets) {
  const std::vector<ReadChunk>& chunks = s.plan.chunks;
  s.leases.resize(chunks.size());
  s.streams.resize(s.catalog.tensors.size());
  s.digests.assign(s.catalog.tensors.size(), 0);
  for (std::uint32_t t = 0; t < s.catalog.tensors.size(); ++t) {
    if (s.catalog.tensors[t].nbytes != 0 || !budgets.compute_digests) continue;
    s.digests[t] = io::xxh3_64({});
    QLOAD_TRY(check_digest(s.catalog, t, s.digests[t], s.expected[t]));
  }
  TaskGraph g;
  const ResourceId reads = g.add_resource("reads in flight", budgets.reads_in_flight);
  const ResourceId workers = g.add_resource("cpu workers", budgets.cpu_workers);
  const ResourceId staging = g.add_resource("staging bytes", s.pool.capacity_bytes());
  std::vector<TaskId> last_verify(s.catalog.tensors.size());  // of each tensor's latest piece
  for (std::uint32_t i = 0; i < chunks.size(); ++i) {
    const ReadChunk& c = chunks[i];
    const std::string name = chunk_name(s, i);
    std::uint64_t payload = 0;  // tensor bytes in the chunk (its read may also cover gaps)
    for (const ChunkPiece& p : c.pieces) payload += p.bytes;
    const auto priority = static_cast<std::int64_t>(i);  // file order: earliest bytes first
    const TaskId read = g.add({.lane = "read",
                               .name = name,
                               .priority = priority,
                               .bytes = c.bytes,
                               .work = IoWork{[&s, i] { return prepare_read(s, i); }},
                               .claims = {{reads, 1}}});
    std::optional<HoldId> slot;
    if (!c.direct) {
      slot = g.add_hold(read, {staging, s.pool.slot_bytes()}, [&s, i] { s.leases[i].reset(); });
      const TaskId place = g.add({.lane = "place",
                                  .name = name,
                                  .priority = priority,
                                  .bytes = payload,
                                  .work = CpuWork{[&s, i] { return place_chunk(s, i); }},
                                  .claims = {{workers, 1}}});
      g.depends_on(place, read);
      g.add_hold_user(*slot, place);
    }
    if (!budgets.compute_digests) continue;
    const TaskId verify = g.add({.lane = "verify",
                                 .name = name,
                                 .priority = priority,
                                 .bytes = payload,
                                 .work = CpuWork{[&s, i] { return verify_chunk(s, i); }},
                                 .claims = {{workers, 1}}});
    g.depends_on(verify, read);
    if (const ChunkPiece& first = c.pieces.front(); first.tensor_offset > 0)
      g.depends_on(verify, last_verify[first.tensor]);
    last_verify[c.pieces.back().tensor] = verify;
    if (slot) g.add_hold_user(*slot, verify);
  }
  return g;
}

}  // namespace qload::scheduler::detail

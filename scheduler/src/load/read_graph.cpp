#include "load/read_graph.hpp"

#include "load/decode_graph.hpp"
#include "load/shard_delivery.hpp"
#include "load/shared_exchange.hpp"
#include "load/stream_tasks.hpp"

#include <cstring>
#include <optional>

#include <fmt/format.h>

namespace qload::scheduler::detail {
namespace {

// The arena a directly read piece lands in: its tensor's, or its shard's.
std::uint32_t direct_region(const ReadLoadState& s, const ChunkPiece& piece) {
  return piece.shard != kNoRegion ? s.plan.copies.shards[piece.shard].region
                                  : s.plan.layout.tensors[piece.tensor].region;
}

// Where a directly read piece lands: its tensor's arena slot, or its shard's.
std::byte* direct_destination(const ReadLoadState& s, const ChunkPiece& piece) {
  if (piece.shard != kNoRegion) {
    const ShardPlacement& shard = s.plan.copies.shards[piece.shard];
    return s.targets[shard.region]->base() + shard.offset + piece.shard_offset;
  }
  const TensorPlacement& p = s.plan.layout.tensors[piece.tensor];
  return s.targets[p.region]->base() + p.offset + piece.tensor_offset;
}

Result<io::ReadRequest> prepare_read(ReadLoadState& s, std::uint32_t index) {
  const ReadChunk& chunk = s.plan.reads.chunks[index];
  std::byte* dest = nullptr;
  bool callers = false;
  if (chunk.direct) {  // host arenas only; a span's read may start before its first piece
    dest = direct_destination(s, chunk.pieces.front()) - chunk.pieces.front().chunk_offset;
    callers = s.plan.layout.arenas[direct_region(s, chunk.pieces.front())].external;
  } else {
    s.leases[index] = s.pool.try_lease();
    // The executor's staging budget equals the pool's capacity, so this cannot happen.
    if (!s.leases[index]) return fail(Errc::kInternal, "staging pool exhausted within the staging budget");
    dest = s.leases[index].bytes().data();
  }
  // The plan's chunks fit the host address space: each lies in a slot or in the arena.
  // The caller's memory (fresh tensors, as a rule) may be filled page by page; qload's own
  // arenas keep their huge pages (io::ReadRequest::fill_pages).
  return io::ReadRequest{.file = chunk.file,
                         .offset = chunk.file_offset,
                         .dest = std::span(dest, static_cast<std::size_t>(chunk.bytes)),
                         .fill_pages = callers};
}

// Another holder's copy of a relayed tensor, as its reader cuts it into the relay arena.
ShardPlacement relay_copy(const Plan& plan, const TensorPlacement& placed, const RelayedTensor::Copy& copy) {
  const RelayedTensor& relayed = plan.copies.relayed[placed.relay_index];
  return ShardPlacement{.tensor = relayed.tensor,
                        .region = plan.copies.relay_region,
                        .offset = copy.offset,
                        .dtype = relayed.dtype,
                        .bytes = copy.bytes,
                        .slice = copy.slice};
}

// Where a piece's bytes are once its chunk has been read.
const std::byte* piece_bytes(const ReadLoadState& s, std::uint32_t index, const ChunkPiece& piece) {
  if (s.plan.reads.chunks[index].direct) return direct_destination(s, piece);
  return s.leases[index].bytes().data() + piece.chunk_offset;
}

// Delivers the chunk's pieces bound for the arenas `wanted` accepts (host ones for `place`,
// one GPU's for an `h2d` task).
template <typename Wanted>
Status deliver_chunk(ReadLoadState& s, std::uint32_t index, Wanted wanted) {
  std::vector<std::vector<Delivery>> by_region(s.targets.size());
  for (const ChunkPiece& piece : s.plan.reads.chunks[index].pieces) {
    const TensorPlacement& p = s.plan.layout.tensors[piece.tensor];
    for (std::uint32_t k = p.first_shard; k < p.first_shard + p.shard_count; ++k) {
      const ShardPlacement& shard = s.plan.copies.shards[k];
      if (wanted(shard.region))
        shard_deliveries(s.catalog.tensors[piece.tensor], shard, piece, piece_bytes(s, index, piece),
                         by_region[shard.region]);
    }
    const DType from = s.catalog.tensors[piece.tensor].dtype;
    if (p.relayed && wanted(s.plan.copies.relay_region))  // the other holders' copies, cut for sending
      for (const RelayedTensor::Copy& copy : s.plan.copies.relayed[p.relay_index].copies)
        shard_deliveries(s.catalog.tensors[piece.tensor], relay_copy(s.plan, p, copy), piece,
                         piece_bytes(s, index, piece), by_region[s.plan.copies.relay_region]);
    if (p.shard_count > 0 || !wanted(p.region)) continue;
    // A converted tensor is split at element boundaries (chunker), so this is exact.
    const std::uint64_t placed_offset =
        p.dtype == from ? piece.tensor_offset
                        : piece.tensor_offset / dtype_info(from).block_bytes * dtype_info(p.dtype).block_bytes;
    by_region[p.region].push_back(
        Delivery{.stored = std::span(piece_bytes(s, index, piece), static_cast<std::size_t>(piece.bytes)),
                 .arena_offset = p.offset + placed_offset,
                 .from = from,
                 .to = p.dtype});
  }
  for (std::size_t r = 0; r < by_region.size(); ++r)
    if (!by_region[r].empty()) QLOAD_TRY(s.targets[r]->deliver(by_region[r]));
  return {};
}

// Hashes each piece: a whole tensor at once, a tensor spanning chunks through its stream
// (the verify tasks of its chunks run in file order, chained by dependencies).
Status verify_chunk(ReadLoadState& s, std::uint32_t index) {
  for (const ChunkPiece& piece : s.plan.reads.chunks[index].pieces) {
    if (s.plan.layout.tensors[piece.tensor].partial) continue;  // this process reads only some of it
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

// Moves the rows of a tensor read straight into its destination into the caller's order
// (RowPermutation): row j takes stored row source[j], following each cycle with one row of
// scratch, so every row moves once.
Status permute_rows(ReadLoadState& s, const RowPermutation& permutation) {
  const TensorPlacement& p = s.plan.layout.tensors[permutation.tensor];
  const formats::TensorEntry& t = s.catalog.tensors[permutation.tensor];
  std::byte* const base = s.targets[p.region]->base() + p.offset;
  const std::size_t row = static_cast<std::size_t>(t.nbytes / t.shape[0]);
  const std::vector<std::uint64_t>& source = permutation.source;
  std::vector<std::byte> held(row);
  std::vector<bool> done(source.size(), false);
  for (std::uint64_t start = 0; start < source.size(); ++start) {
    if (done[start] || source[start] == start) continue;
    std::memcpy(held.data(), base + start * row, row);
    std::uint64_t k = start;
    while (source[k] != start) {
      std::memcpy(base + k * row, base + source[k] * row, row);
      done[k] = true;
      k = source[k];
    }
    std::memcpy(base + k * row, held.data(), row);
    done[k] = true;
  }
  return {};
}

std::string chunk_name(const ReadLoadState& s, std::uint32_t index) {
  const ReadChunk& c = s.plan.reads.chunks[index];
  if (c.direct) {
    const ChunkPiece& p = c.pieces.front();
    return fmt::format("{} +{}", s.catalog.tensors[p.tensor].name, p.tensor_offset);
  }
  return fmt::format("chunk {} ({} tensors)", index, c.pieces.size());
}

struct DeliveryIds {
  TaskId read;
  HoldId slot;
  ResourceId workers;
  const std::vector<std::optional<ResourceId>>& lanes;
};

struct Deliveries {
  std::optional<TaskId> place;  // after it, the chunk's host-bound pieces are in place
  std::vector<TaskId> all;      // place and every h2d
};

// The staged chunk's consumers besides verify: one `place` for its host pieces, one `h2d` per
// GPU it feeds.
Deliveries add_deliveries(TaskGraph& g, ReadLoadState& s, std::uint32_t i, const DeliveryIds& ids,
                          const std::string& name, std::int64_t priority) {
  std::vector<std::uint64_t> bytes(s.targets.size(), 0);
  for (const ChunkPiece& p : s.plan.reads.chunks[i].pieces) {
    const TensorPlacement& placed = s.plan.layout.tensors[p.tensor];
    if (placed.shard_count == 0) bytes[placed.region] += p.bytes;
    if (placed.relayed)
      for (const RelayedTensor::Copy& copy : s.plan.copies.relayed[placed.relay_index].copies)
        bytes[s.plan.copies.relay_region] +=
            shard_piece_size(s.catalog.tensors[p.tensor], relay_copy(s.plan, placed, copy), p).bytes;
    for (std::uint32_t k = placed.first_shard; k < placed.first_shard + placed.shard_count; ++k)
      bytes[s.plan.copies.shards[k].region] +=
          shard_piece_size(s.catalog.tensors[p.tensor], s.plan.copies.shards[k], p).bytes;
  }
  auto add = [&](TaskSpec spec) {
    const TaskId task = g.add(std::move(spec));
    g.depends_on(task, ids.read);
    g.add_hold_user(ids.slot, task);
    return task;
  };
  Deliveries out;
  std::uint64_t host_bytes = 0;
  for (std::size_t r = 0; r < bytes.size(); ++r) host_bytes += s.targets[r]->on_host() ? bytes[r] : 0;
  if (host_bytes > 0)
    out.place = add({.lane = "place",
                     .name = name,
                     .priority = priority,
                     .bytes = host_bytes,
                     .work = CpuWork{[&s, i] {
                       return deliver_chunk(s, i, [&s](std::uint32_t r) { return s.targets[r]->on_host(); });
                     }},
                     .claims = {{ids.workers, 1}}});
  for (std::uint32_t r = 0; r < bytes.size(); ++r) {
    if (s.targets[r]->on_host() || bytes[r] == 0) continue;
    out.all.push_back(add(
        {.lane = "h2d",
         .name = fmt::format("{} -> {}", name, s.plan.layout.arenas[r].device.to_string()),
         .priority = priority,
         .bytes = bytes[r],
         .work = CpuWork{[&s, i, r] { return deliver_chunk(s, i, [r](std::uint32_t region) { return region == r; }); }},
         .claims = {{*ids.lanes[r], 1}}}));
  }
  if (out.place) out.all.push_back(*out.place);
  return out;
}

// What building the read graph shares: the graph, its resources, and per tensor the tasks that
// put its bytes in place or check them.
struct ReadGraph {
  ReadLoadState& s;
  TaskGraph& g;
  const ReadBudgets& budgets;
  TensorStream* stream;
  ResourceId reads;
  ResourceId workers;
  ResourceId staging;
  const std::vector<std::optional<ResourceId>>& lanes;  // per GPU arena
  std::vector<TaskId> last_verify;                      // of each tensor's latest piece
  std::vector<std::vector<TaskId>> ready;               // tasks that put host-bound bytes in place
  // Streaming: per tensor, every task that writes or checks its bytes.
  std::vector<std::vector<TaskId>> finishers;

  // Streaming: `task` writes or checks the bytes of each tensor of chunk c.
  void finishing(const ReadChunk& c, TaskId task) {
    if (stream == nullptr) return;
    for (const ChunkPiece& p : c.pieces) finishers[p.tensor].push_back(task);
  }
};

// Sizes the state's per-chunk and per-tensor fields; zero-byte tensors get their digest (and
// its check) here.
Status start_state(ReadLoadState& s, const ReadBudgets& budgets) {
  s.leases.resize(s.plan.reads.chunks.size());
  s.streams.resize(s.catalog.tensors.size());
  s.digests.assign(s.catalog.tensors.size(), 0);
  for (std::uint32_t t = 0; t < s.catalog.tensors.size(); ++t) {
    if (s.catalog.tensors[t].nbytes != 0 || !budgets.compute_digests) continue;
    s.digests[t] = io::xxh3_64({});
    QLOAD_TRY(check_digest(s.catalog, t, s.digests[t], s.expected[t]));
  }
  return {};
}

// Chunk i's read, its deliveries when staged, and its verify when digests are computed.
void add_chunk_tasks(ReadGraph& b, std::uint32_t i) {
  ReadLoadState& s = b.s;
  TaskGraph& g = b.g;
  const ReadChunk& c = s.plan.reads.chunks[i];
  const std::string name = chunk_name(s, i);
  std::uint64_t payload = 0;  // tensor bytes in the chunk (its read may also cover gaps)
  for (const ChunkPiece& p : c.pieces) payload += p.bytes;
  const auto priority = static_cast<std::int64_t>(i);  // file order: earliest bytes first
  const TaskId read = g.add({.lane = "read",
                             .name = name,
                             .priority = priority,
                             .bytes = c.bytes,
                             .work = IoWork{[&s, i] { return prepare_read(s, i); }},
                             .claims = {{b.reads, 1}}});
  b.finishing(c, read);
  std::optional<HoldId> slot;
  std::optional<TaskId> landed = read;  // direct chunks are in place once read
  if (!c.direct) {
    slot = g.add_hold(read, {b.staging, s.pool.slot_bytes()}, [&s, i] { s.leases[i].reset(); });
    const Deliveries deliveries =
        add_deliveries(g, s, i, {.read = read, .slot = *slot, .workers = b.workers, .lanes = b.lanes}, name, priority);
    landed = deliveries.place;
    for (const TaskId d : deliveries.all) b.finishing(c, d);
  }
  if (landed)
    for (const ChunkPiece& p : c.pieces) b.ready[p.tensor].push_back(*landed);
  if (!b.budgets.compute_digests) return;
  const TaskId verify = g.add({.lane = "verify",
                               .name = name,
                               .priority = priority,
                               .bytes = payload,
                               .work = CpuWork{[&s, i] { return verify_chunk(s, i); }},
                               .claims = {{b.workers, 1}}});
  g.depends_on(verify, read);
  b.finishing(c, verify);
  if (const ChunkPiece& first = c.pieces.front();
      first.tensor_offset > 0 && !s.plan.layout.tensors[first.tensor].partial)
    g.depends_on(verify, b.last_verify[first.tensor]);
  b.last_verify[c.pieces.back().tensor] = verify;
  if (slot) g.add_hold_user(*slot, verify);
}

void add_permute_task(ReadGraph& b, const RowPermutation& permutation) {
  ReadLoadState& s = b.s;
  // After every read of the tensor and its digest (over the bytes in file order).
  const std::uint32_t t = permutation.tensor;
  const TaskId permute = b.g.add({.lane = "place",
                                  .name = "permute " + s.catalog.tensors[t].name,
                                  .bytes = s.catalog.tensors[t].nbytes,
                                  .work = CpuWork{[&s, &permutation] { return permute_rows(s, permutation); }},
                                  .claims = {{b.workers, 1}}});
  for (const TaskId placed : b.ready[t]) b.g.depends_on(permute, placed);
  if (b.budgets.compute_digests && s.catalog.tensors[t].nbytes > 0) b.g.depends_on(permute, b.last_verify[t]);
  b.ready[t] = {permute};
  if (b.stream != nullptr) b.finishers[t].push_back(permute);
}

// Shared reads: a tensor read for other processes leaves once in place.
void add_send_tasks(ReadGraph& b, SharedExchange* exchange) {
  for (std::uint32_t t = 0; t < b.s.catalog.tensors.size(); ++t) {
    if (!exchange->sends()[t]) continue;
    const TaskId send = b.g.add({.lane = "send",
                                 .name = b.s.catalog.tensors[t].name,
                                 .priority = -1,  // at once: the others are waiting for it
                                 .bytes = b.s.catalog.tensors[t].nbytes,
                                 .work = CpuWork{[exchange, t] {
                                   exchange->send(t);  // a failure waits for the barrier (shared_exchange.hpp)
                                   return Status{};
                                 }}});
    for (const TaskId placed : b.ready[t]) b.g.depends_on(send, placed);
  }
}

}  // namespace

Result<TaskGraph> build_read_graph(ReadLoadState& s, const ReadBudgets& budgets, TensorStream* stream,
                                   SharedExchange* exchange) {
  QLOAD_TRY(start_state(s, budgets));
  TaskGraph g;
  const ResourceId reads = g.add_resource("reads in flight", budgets.reads_in_flight);
  const ResourceId workers = g.add_resource("cpu workers", budgets.cpu_workers);
  const ResourceId staging = g.add_resource("staging bytes", s.pool.capacity_bytes());
  std::vector<std::optional<ResourceId>> lanes(s.targets.size());  // per GPU arena
  for (std::size_t r = 0; r < s.targets.size(); ++r)
    if (!s.targets[r]->on_host())
      lanes[r] = g.add_resource(s.plan.layout.arenas[r].device.to_string() + " copy lanes", budgets.copy_lanes);
  ReadGraph b{.s = s,
              .g = g,
              .budgets = budgets,
              .stream = stream,
              .reads = reads,
              .workers = workers,
              .staging = staging,
              .lanes = lanes,
              .last_verify = std::vector<TaskId>(s.catalog.tensors.size()),
              .ready = std::vector<std::vector<TaskId>>(s.catalog.tensors.size()),
              .finishers = std::vector<std::vector<TaskId>>(stream != nullptr ? s.catalog.tensors.size() : 0)};
  for (std::uint32_t i = 0; i < s.plan.reads.chunks.size(); ++i) add_chunk_tasks(b, i);
  for (const RowPermutation& permutation : s.plan.layout.permuted) add_permute_task(b, permutation);
  if (exchange != nullptr) add_send_tasks(b, exchange);
  const std::vector<std::vector<TaskId>> decoders = add_decode_tasks(g, s, b.ready, workers, lanes);
  if (stream != nullptr) add_stream_tasks(g, s.plan, *stream, b.finishers, decoders);
  return g;
}

}  // namespace qload::scheduler::detail

// Relayed shared reads (SharedReads::kRelay), once every process has read: each relayed
// tensor's reader kept the stored tensor in its relay arena, and every other holder gets its
// copies cut from it with the same runs that cut staged pieces (converted as placed).
// - A holder on the reader's machine maps the reader's relay arena (shared memory, through the
//   communicator's peer regions) and cuts its copies straight into its shards: one copy, nothing
//   on a socket.
// - Any other holder gets them from the reader through the communicator (Gloo), in shard
//   order, several tensors' copies moved at once, and puts them in place.
// Every process takes part in every exchange even after a local failure, so none waits for a
// timeout; a last barrier keeps each relay arena alive until every peer is done with it, and
// fails everyone if anyone failed.
#include <vector>

#include <fmt/format.h>

#include "load_internal.hpp"
#include "shard_delivery.hpp"

namespace qload::scheduler::detail {
namespace {

// Relayed copies sent through the communicator in one go, at most about this many bytes (the
// reader holds them cut until they are sent).
constexpr std::uint64_t kRelayWindowBytes = std::uint64_t{64} << 20;

// The reader's side: the copies of the holders in `sizes` (non-zero), cut from the stored
// tensor and converted as placed, one message per process.
Result<std::vector<std::vector<std::byte>>> cut_copies(const formats::TensorEntry& t, const RelayedTensor& relayed,
                                                       const std::vector<std::uint64_t>& sizes,
                                                       const std::byte* stored) {
  std::vector<std::vector<std::byte>> parts(sizes.size());
  std::vector<std::uint64_t> filled(parts.size(), 0);
  for (std::size_t q = 0; q < parts.size(); ++q) parts[q].resize(static_cast<std::size_t>(sizes[q]));
  const ChunkPiece whole{.tensor = relayed.tensor, .tensor_offset = 0, .bytes = t.nbytes};
  std::vector<Delivery> runs;
  for (const RelayedTensor::Copy& copy : relayed.copies) {
    if (sizes[copy.process] == 0) continue;
    const ShardPlacement shard{.tensor = relayed.tensor,
                               .offset = filled[copy.process],
                               .dtype = relayed.dtype,
                               .bytes = copy.bytes,
                               .slice = copy.slice};
    runs.clear();
    shard_deliveries(t, shard, whole, stored, runs);
    QLOAD_TRY(deliver_on_host(parts[copy.process].data(), runs));
    filled[copy.process] += copy.bytes;
  }
  return parts;
}

// A holder's side, reading the reader's relay arena in place: its copies cut into its shards,
// straight into a host arena; for a GPU, cut and converted on the host first (a GPU converts
// through its copy lanes' scratch, sized for staged pieces, not whole shards).
Status cut_in_place(const formats::TensorEntry& t, const Plan& plan, const TensorPlacement& placed,
                    std::span<const std::byte> stored, std::span<const std::unique_ptr<ArenaTarget>> targets) {
  std::vector<std::vector<Delivery>> by_region(targets.size());
  std::vector<std::vector<std::byte>> staged;  // GPU-bound copies, as placed
  staged.reserve(placed.shard_count);
  std::vector<Delivery> runs;
  const ChunkPiece whole{.tensor = plan.shards[placed.first_shard].tensor, .tensor_offset = 0, .bytes = t.nbytes};
  for (std::uint32_t k = placed.first_shard; k < placed.first_shard + placed.shard_count; ++k) {
    const ShardPlacement& shard = plan.shards[k];
    if (targets[shard.region]->on_host()) {
      shard_deliveries(t, shard, whole, stored.data(), by_region[shard.region]);
      continue;
    }
    ShardPlacement at_zero = shard;
    at_zero.offset = 0;
    runs.clear();
    shard_deliveries(t, at_zero, whole, stored.data(), runs);
    std::vector<std::byte>& host = staged.emplace_back(static_cast<std::size_t>(shard.bytes));
    QLOAD_TRY(deliver_on_host(host.data(), runs));
    by_region[shard.region].push_back(Delivery{
        .stored = host, .arena_offset = shard.offset, .from = shard.dtype, .to = shard.dtype, .pageable = true});
  }
  for (std::size_t r = 0; r < by_region.size(); ++r)
    if (!by_region[r].empty()) QLOAD_TRY(targets[r]->deliver(by_region[r]));
  return {};
}

// A holder's side, from the bytes scattered to it: its copies, in shard order.
Status put_received(const Plan& plan, const TensorPlacement& placed, std::span<const std::byte> received,
                    std::span<const std::unique_ptr<ArenaTarget>> targets) {
  std::vector<std::vector<Delivery>> by_region(targets.size());
  std::uint64_t at = 0;
  for (std::uint32_t k = placed.first_shard; k < placed.first_shard + placed.shard_count; ++k) {
    const ShardPlacement& shard = plan.shards[k];
    if (at + shard.bytes > received.size())
      return fail(Errc::kInternal, fmt::format("{} bytes received, fewer than its copies here", received.size()));
    by_region[shard.region].push_back(Delivery{.stored = received.subspan(at, shard.bytes),
                                               .arena_offset = shard.offset,
                                               .from = shard.dtype,
                                               .to = shard.dtype,
                                               .pageable = true});
    at += shard.bytes;
  }
  for (std::size_t r = 0; r < by_region.size(); ++r)
    if (!by_region[r].empty()) QLOAD_TRY(targets[r]->deliver(by_region[r]));
  return {};
}

}  // namespace

Result<RelayStats> relay_shared(const formats::Catalog& catalog, const Plan& plan,
                                std::span<const std::unique_ptr<ArenaTarget>> targets, Communicator& communicator,
                                bool map_peer_memory) {
  RelayStats stats;
  const std::uint32_t me = communicator.rank();
  std::optional<PeerAddress> relay_arena;  // this process's, which the others may read in place
  if (plan.relay_region != kNoRegion) relay_arena = targets[plan.relay_region]->peer_address();
  QLOAD_ASSIGN_OR_RETURN(const PeerRegions maps, communicator.map_peer_regions(relay_arena, map_peer_memory));
  Status local;  // the first failure here; collectives go on regardless
  const auto named = [&](const RelayedTensor& relayed, Status failed) {
    return fail(std::move(failed)
                    .error()
                    .with_tensor(catalog.tensors[relayed.tensor].name)
                    .with_note(fmt::format("relaying it from process {}", relayed.reader)));
  };
  // Copies that go through the communicator travel in windows of several tensors, all moved
  // at once (every process forms the same windows: the sizes are the plan's).
  struct Sent {
    const RelayedTensor* relayed;
    std::vector<std::vector<std::byte>> parts;  // the reader's: one per process
    std::vector<std::byte> mine;                // a holder's: what it receives
  };
  std::vector<Sent> window;
  std::vector<HostMove> moves;
  std::uint64_t window_bytes = 0;
  const auto flush = [&]() -> Status {
    if (Status moved = communicator.move(moves); !moved)
      return named(*window.front().relayed,
                   fail(std::move(moved).error().with_note(fmt::format("with {} more tensors", window.size() - 1))));
    for (const Sent& sent : window) {
      const RelayedTensor& relayed = *sent.relayed;
      if (me == relayed.reader || !plan.tensors[relayed.tensor].received || !local) continue;
      if (Status put = put_received(plan, plan.tensors[relayed.tensor], sent.mine, targets); !put) {
        local = named(relayed, std::move(put));
      } else {
        stats.received_bytes += sent.mine.size();
      }
    }
    window.clear();
    moves.clear();
    window_bytes = 0;
    return {};
  };
  for (const RelayedTensor& relayed : plan.relayed) {
    const formats::TensorEntry& t = catalog.tensors[relayed.tensor];
    const TensorPlacement& placed = plan.tensors[relayed.tensor];
    // What goes over the communicator: the copies of holders that do not read in place.
    std::vector<std::uint64_t> sizes = relayed.bytes_to;
    std::uint64_t total = 0;
    for (std::uint32_t q = 0; q < sizes.size(); ++q) {
      if (maps.reads_in_place(q, relayed.reader)) sizes[q] = 0;
      total += sizes[q];
    }
    if (total > 0) {
      Sent& sent = window.emplace_back(Sent{.relayed = &relayed, .parts = {}, .mine = {}});
      if (me == relayed.reader && local) {
        auto cut = cut_copies(t, relayed, sizes, targets[plan.relay_region]->base() + relayed.offset);
        if (cut) {
          sent.parts = std::move(*cut);
        } else {
          local = named(relayed, fail(std::move(cut).error()));
        }
      }
      if (me == relayed.reader && sent.parts.empty()) {  // after a failure here: placeholders, so no one waits
        sent.parts.resize(sizes.size());
        for (std::size_t q = 0; q < sizes.size(); ++q) sent.parts[q].resize(static_cast<std::size_t>(sizes[q]));
      }
      if (me != relayed.reader) sent.mine.resize(static_cast<std::size_t>(sizes[me]));
      // (Moving a Sent keeps its buffers where they are: the spans stay valid as the window grows.)
      for (std::uint32_t q = 0; q < sizes.size(); ++q) {
        if (q == relayed.reader || sizes[q] == 0) continue;
        const std::span<std::byte> bytes = me == relayed.reader ? std::span(sent.parts[q])
                                           : q == me            ? std::span(sent.mine)
                                                                : std::span<std::byte>();
        moves.push_back({.from = relayed.reader, .to = q, .bytes = bytes});
      }
      window_bytes += total;
      if (window_bytes >= kRelayWindowBytes) QLOAD_TRY(flush());
    }
    if (!placed.received || !local || !maps.reads_in_place(me, relayed.reader)) continue;
    const MappedRegion& mapped = maps.mapped[relayed.reader];
    const std::span<const std::byte> arena(mapped.data(), static_cast<std::size_t>(mapped.size()));
    if (relayed.offset > arena.size() || t.nbytes > arena.size() - relayed.offset) {
      local = named(relayed, fail(Errc::kInternal, "the reader's relay arena is smaller than its plan says"));
      continue;
    }
    if (Status put = cut_in_place(t, plan, placed, arena.subspan(relayed.offset, t.nbytes), targets); !put)
      local = named(relayed, std::move(put));
    stats.in_place_bytes += relayed.bytes_to[me];
  }
  if (!window.empty()) QLOAD_TRY(flush());
  // Each relay arena stays until every peer is done reading it; a failure anywhere fails all.
  Result<bool> everyone = communicator.all_ok(local.has_value());
  if (!everyone) return fail(std::move(everyone.error()).with_note("stage: after relaying shared tensors"));
  QLOAD_TRY(local);
  if (!*everyone) return fail(Errc::kCancelled, "another process failed while shared tensors were relayed");
  return stats;
}

}  // namespace qload::scheduler::detail

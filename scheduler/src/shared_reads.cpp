// Shared reads (ParallelLayout::share_reads), once every process has read the tensors it
// reads (SharedReadsBarrier):
// - kBroadcast: each tensor's reader broadcasts its copies (every tensor rank's shard on each
//   of its devices) to the same devices of the other processes. Replicas hold identical
//   arenas, so a copy is the same bytes everywhere.
// - kRelay: each tensor's reader cuts every other holder's copies from the stored tensor it
//   kept in scratch, with the same runs that cut staged pieces, and scatters them; each holder
//   puts the bytes it receives in its shards, in shard order.
#include <vector>

#include <fmt/format.h>

#include "load_internal.hpp"
#include "shard_delivery.hpp"

namespace qload::scheduler::detail {

Status broadcast_shared(Model& model, const Plan& plan, Communicator& communicator) {
  // Under a parallel layout without decoding, the model's tensors are each stored tensor's
  // copies in catalog order, in shard order.
  const std::span<const DeviceTensor> tensors = model.tensors();
  std::size_t next = 0;
  std::vector<BroadcastBuffer> buffers;
  for (const TensorPlacement& p : plan.tensors) {
    buffers.clear();
    for (std::uint32_t k = p.first_shard; k < p.first_shard + p.shard_count; ++k) {
      if (next >= tensors.size()) return fail(Errc::kInternal, "shared reads: fewer tensors than copies");
      const DeviceTensor& t = tensors[next++];
      if (t.nbytes == 0) continue;
      // The model's own arena, filled here before anyone else sees it.
      buffers.push_back({.bytes = std::span(const_cast<std::byte*>(t.data), static_cast<std::size_t>(t.nbytes)),
                         .on_device = !t.host,
                         .slot = plan.shards[k].region});
    }
    if (buffers.empty()) continue;
    if (Status sent = communicator.broadcast(buffers, p.reader); !sent)
      return fail(std::move(sent)
                      .error()
                      .with_tensor(tensors[next - 1].name)
                      .with_note(fmt::format("sending it from process {}", p.reader)));
  }
  return {};
}

Status SharedReadsBarrier::pass(bool ok) {
  if (passed_) return fail(Errc::kInternal, "the shared-read barrier was passed twice");
  passed_ = true;
  QLOAD_ASSIGN_OR_RETURN(const bool everyone, communicator_.all_ok(ok));
  if (ok && !everyone)
    return fail(Errc::kCancelled, "another process of the load failed, so the tensors it read cannot arrive");
  return {};
}

namespace {

// The reader's side: every other holder's copies of `relayed`, cut from the stored tensor
// (`stored`, in scratch) and converted as placed, one message per process.
Result<std::vector<std::vector<std::byte>>> cut_copies(const formats::TensorEntry& t, const RelayedTensor& relayed,
                                                       const std::byte* stored) {
  std::vector<std::vector<std::byte>> parts(relayed.bytes_to.size());
  std::vector<std::uint64_t> filled(parts.size(), 0);
  for (std::size_t q = 0; q < parts.size(); ++q) parts[q].resize(static_cast<std::size_t>(relayed.bytes_to[q]));
  const ChunkPiece whole{.tensor = relayed.tensor, .tensor_offset = 0, .bytes = t.nbytes};
  std::vector<Delivery> runs;
  for (const RelayedTensor::Copy& copy : relayed.copies) {
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

}  // namespace

Status relay_shared(const formats::Catalog& catalog, const Plan& plan,
                    std::span<const std::unique_ptr<ArenaTarget>> targets, Communicator& communicator) {
  const std::uint32_t me = communicator.rank();
  for (const RelayedTensor& relayed : plan.relayed) {
    const formats::TensorEntry& t = catalog.tensors[relayed.tensor];
    const TensorPlacement& placed = plan.tensors[relayed.tensor];
    const auto named = [&](Status failed) {
      return fail(std::move(failed).error().with_tensor(t.name).with_note(
          fmt::format("relaying it from process {}", relayed.reader)));
    };
    std::vector<std::vector<std::byte>> parts;
    std::vector<std::span<const std::byte>> views;
    if (me == relayed.reader) {
      auto cut = cut_copies(t, relayed, targets[plan.relay_region]->base() + relayed.offset);
      if (!cut) return named(fail(std::move(cut).error()));
      parts = std::move(*cut);
      views.assign(parts.begin(), parts.end());
    }
    std::vector<std::byte> mine(me == relayed.reader ? 0 : static_cast<std::size_t>(relayed.bytes_to[me]));
    if (Status sent = communicator.scatter(relayed.bytes_to, views, mine, relayed.reader); !sent)
      return named(std::move(sent));
    if (!placed.received) continue;
    // This process's copies, in shard order, as the reader cut them.
    std::vector<std::vector<Delivery>> by_region(targets.size());
    std::uint64_t at = 0;
    for (std::uint32_t k = placed.first_shard; k < placed.first_shard + placed.shard_count; ++k) {
      const ShardPlacement& shard = plan.shards[k];
      if (at + shard.bytes > mine.size())
        return named(fail(Errc::kInternal, fmt::format("{} bytes received, fewer than its copies here", mine.size())));
      by_region[shard.region].push_back(Delivery{.stored = std::span(mine).subspan(at, shard.bytes),
                                                 .arena_offset = shard.offset,
                                                 .from = shard.dtype,
                                                 .to = shard.dtype});
      at += shard.bytes;
    }
    for (std::size_t r = 0; r < by_region.size(); ++r)
      if (!by_region[r].empty())
        if (Status put = targets[r]->deliver(by_region[r]); !put) return named(std::move(put));
  }
  return {};
}

}  // namespace qload::scheduler::detail

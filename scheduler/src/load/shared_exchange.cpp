#include "load/shared_exchange.hpp"

#include <fmt/format.h>

namespace qload::scheduler::detail {

Result<SharedExchange> SharedExchange::start(const Plan& plan, std::span<const std::unique_ptr<ArenaTarget>> targets,
                                             distributed::Communicator& communicator) {
  SharedExchange x;
  x.rank_ = communicator.rank();
  const std::uint32_t me = x.rank_;
  x.sends_.assign(plan.layout.tensors.size(), false);
  x.moves_of_.assign(plan.layout.tensors.size(), {0, 0});
  const auto arena_bytes = [&](const ShardPlacement& shard) {
    return std::span(targets[shard.region]->base() + shard.offset, static_cast<std::size_t>(shard.bytes));
  };
  // Where this process receives `shard`'s copy: in place on the host, else an inbox.
  const auto receive_into = [&](const ShardPlacement& shard) -> std::span<std::byte> {
    if (targets[shard.region]->on_host()) return arena_bytes(shard);
    Inbox& inbox = x.inboxes_.emplace_back(Inbox{.bytes = std::vector<std::byte>(shard.bytes),
                                                 .region = shard.region,
                                                 .offset = shard.offset,
                                                 .dtype = shard.dtype});
    return inbox.bytes;
  };
  const auto first = [&] { return static_cast<std::uint32_t>(x.moves_.size()); };
  if (plan.copies.shared_reads == SharedReads::kBroadcast) {
    // Each reader's host copies to every other process, the same place in each one's arena.
    for (std::uint32_t t = 0; t < plan.layout.tensors.size(); ++t) {
      const TensorPlacement& p = plan.layout.tensors[t];
      x.moves_of_[t].first = first();
      for (std::uint32_t k = p.first_shard; k < p.first_shard + p.shard_count; ++k) {
        const ShardPlacement& shard = plan.copies.shards[k];
        if (shard.bytes == 0 || !targets[shard.region]->on_host()) continue;
        for (std::uint32_t q = 0; q < communicator.size(); ++q) {
          if (q == p.reader) continue;
          x.moves_.push_back({.from = p.reader,
                              .to = q,
                              .bytes = me == p.reader || me == q ? arena_bytes(shard) : std::span<std::byte>()});
          if (me == q) x.received_bytes_ += shard.bytes;
        }
      }
      x.moves_of_[t].second = first();
      x.sends_[t] = p.reader == me && x.moves_of_[t].second > x.moves_of_[t].first;
    }
  } else if (plan.copies.shared_reads == SharedReads::kRelay) {
    // Each relayed tensor's copies, as cut into its reader's relay arena; a holder's copies of
    // one tensor come in its shard order.
    for (const RelayedTensor& relayed : plan.copies.relayed) {
      const TensorPlacement& p = plan.layout.tensors[relayed.tensor];
      x.moves_of_[relayed.tensor].first = first();
      std::uint32_t mine = 0;  // this process's copies of it so far
      for (const RelayedTensor::Copy& copy : relayed.copies) {
        if (copy.bytes == 0) {  // nothing moves, but it is still one of the holder's shards
          mine += me == copy.process ? 1 : 0;
          continue;
        }
        std::span<std::byte> bytes;
        if (me == relayed.reader) {
          bytes =
              std::span(targets[plan.copies.relay_region]->base() + copy.offset, static_cast<std::size_t>(copy.bytes));
        } else if (me == copy.process) {
          if (mine >= p.shard_count || plan.copies.shards[p.first_shard + mine].bytes != copy.bytes)
            return fail(Errc::kInternal, fmt::format("relayed copy {} of {} does not match this process's shards", mine,
                                                     relayed.tensor));
          bytes = receive_into(plan.copies.shards[p.first_shard + mine++]);
          x.received_bytes_ += copy.bytes;
        }
        x.moves_.push_back({.from = relayed.reader, .to = copy.process, .bytes = bytes});
      }
      x.moves_of_[relayed.tensor].second = first();
      x.sends_[relayed.tensor] =
          relayed.reader == me && x.moves_of_[relayed.tensor].second > x.moves_of_[relayed.tensor].first;
    }
  }
  Result<distributed::PostedMoves> posted = communicator.post_moves(x.moves_);
  if (posted) {
    x.posted_ = std::move(*posted);
  } else {
    x.failed(std::move(posted.error()).with_note("stage: asking for the tensors other ranks read, before reading"));
  }
  return x;
}

SharedExchange::SharedExchange(SharedExchange&& other) noexcept
    : rank_(other.rank_),
      moves_(std::move(other.moves_)),
      sends_(std::move(other.sends_)),
      moves_of_(std::move(other.moves_of_)),
      inboxes_(std::move(other.inboxes_)),
      received_bytes_(other.received_bytes_),
      failure_(std::move(other.failure_)),
      posted_(std::move(other.posted_)) {}

void SharedExchange::failed(Error error) {
  const std::lock_guard lock(failure_mutex_);
  if (!failure_) failure_ = std::move(error);
}

Status SharedExchange::status() const {
  const std::lock_guard lock(failure_mutex_);
  if (failure_) return fail(*failure_);
  return {};
}

void SharedExchange::send(std::uint32_t tensor) {
  if (!status()) return;
  const auto [first, last] = moves_of_[tensor];
  for (std::uint32_t i = first; i < last; ++i) {
    if (moves_[i].from != rank_ || moves_[i].bytes.empty()) continue;
    if (Status sent = posted_.send(i); !sent) {
      failed(std::move(sent).error().with_note("stage: sending what this rank read to the ranks that hold it"));
      return;
    }
  }
}

Result<std::uint64_t> SharedExchange::finish(std::span<const std::unique_ptr<ArenaTarget>> targets) {
  QLOAD_TRY(status());
  if (Status done = posted_.finish(); !done)
    return fail(std::move(done).error().with_note("stage: waiting for the tensors other ranks read"));
  for (const Inbox& inbox : inboxes_) {
    const Delivery d{
        .stored = inbox.bytes, .arena_offset = inbox.offset, .from = inbox.dtype, .to = inbox.dtype, .pageable = true};
    QLOAD_TRY(targets[inbox.region]->deliver(std::span(&d, 1)));
  }
  return received_bytes_;
}

}  // namespace qload::scheduler::detail

#include "qload/distributed/communicator.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "gloo_group.hpp"

namespace qload::distributed {

Result<Communicator> Communicator::create(Rendezvous& rendezvous, std::span<const int> gpu_slots,
                                          const CommunicatorTimeouts& timeouts, std::span<void* const> nccl_comms) {
  if (!nccl_comms.empty() && nccl_comms.size() != gpu_slots.size())
    return fail(Errc::kInvalidArgument, fmt::format("{} NCCL communicators handed in for {} device slots",
                                                    nccl_comms.size(), gpu_slots.size()));
  std::unique_ptr<detail::NcclGroup, detail::NcclGroupDeleter> nccl;
  if (std::ranges::any_of(gpu_slots, [](int device) { return device >= 0; })) {
    QLOAD_ASSIGN_OR_RETURN(nccl, detail::make_nccl_group(rendezvous, gpu_slots, timeouts.nccl, nccl_comms));
  } else if (std::ranges::any_of(nccl_comms, [](void* comm) { return comm != nullptr; })) {
    return fail(Errc::kInvalidArgument, "NCCL communicators handed in for host slots (only GPU slots use NCCL)");
  }
  detail::GlooGroupPtr gloo;
  Status made_here;
  if (rendezvous.world().size > 1) {
    Result<detail::GlooGroupPtr> made = detail::make_gloo_group(rendezvous, rendezvous.timeout());
    if (made) {
      gloo = std::move(*made);
    } else if (made.error().code() != Errc::kUnsupported) {  // a build without Gloo refuses host bytes later
      made_here = fail(std::move(made.error()));
    }
  }
  // Nobody starts using the mesh until every rank has connected its part of it: a rank that
  // failed here says why, and a rank that dies later is not mistaken for a failed connection.
  QLOAD_ASSIGN_OR_RETURN(const std::vector<std::string> verdicts,
                         rendezvous.allgather(made_here ? "" : made_here.error().to_string()));
  QLOAD_TRY(made_here);
  for (std::uint32_t r = 0; r < verdicts.size(); ++r)
    if (!verdicts[r].empty())
      return fail(Errc::kCancelled, fmt::format("rank {} could not connect to the others: {}", r, verdicts[r]));
  return Communicator(rendezvous, timeouts.straggler, std::move(nccl), std::move(gloo));
}

Result<bool> Communicator::all_ok(bool ok) {
  Result<std::vector<std::string>> all = rendezvous_->allgather(ok ? "1" : "0", straggler_);
  if (!all)
    return fail(std::move(all.error())
                    .with_note(fmt::format(
                        "waiting for every rank to finish (the straggler_timeout setting: {})",
                        straggler_.count() > 0 ? fmt::format("{} ms", straggler_.count()) : std::string("no limit"))));
  return std::ranges::all_of(*all, [](const std::string& m) { return m == "1"; });
}

Status Communicator::move(std::span<const HostMove> moves) {
  QLOAD_ASSIGN_OR_RETURN(PostedMoves posted, post_moves(std::vector<HostMove>(moves.begin(), moves.end())));
  for (std::size_t i = 0; i < moves.size(); ++i)
    if (moves[i].from == rank() && moves[i].to != rank() && !moves[i].bytes.empty()) QLOAD_TRY(posted.send(i));
  return posted.finish();
}

Result<PostedMoves> Communicator::post_moves(std::vector<HostMove> moves) {
  bool mine = false;
  for (const HostMove& m : moves) {
    if (m.from >= size() || m.to >= size())
      return fail(Errc::kInvalidArgument, fmt::format("a move from rank {} to rank {} of {}", m.from, m.to, size()));
    mine = mine || (!m.bytes.empty() && m.from != m.to && (m.from == rank() || m.to == rank()));
  }
  if (!gloo_) {
    if (!mine) return PostedMoves();
    return fail(Errc::kUnsupported,
                "moving host memory between processes needs Gloo, and this qload was built without it (libgloo-dev)");
  }
  // Every rank with a mesh takes the list's slots, in it or not, so slots stay the same on all.
  QLOAD_ASSIGN_OR_RETURN(detail::GlooExchangePtr posted, detail::gloo_post(*gloo_, std::move(moves)));
  return PostedMoves(std::move(posted));
}

Status PostedMoves::send(std::size_t i) {
  if (!gloo_) return fail(Errc::kInternal, fmt::format("move {} is not this rank's to send", i));
  return detail::gloo_send(*gloo_, i);
}

Status PostedMoves::finish() {
  return gloo_ ? detail::gloo_finish(*gloo_) : Status{};
}

Status Communicator::broadcast(std::span<const BroadcastBuffer> buffers, std::uint32_t root) {
  if (root >= size()) return fail(Errc::kInvalidArgument, fmt::format("broadcast from rank {} of {}", root, size()));
  std::vector<BroadcastBuffer> on_gpus;
  std::vector<HostMove> moves;  // host memory: the root sends the same bytes to every rank
  for (const BroadcastBuffer& b : buffers) {
    if (b.on_device) {
      on_gpus.push_back(b);
      continue;
    }
    for (std::uint32_t q = 0; q < size(); ++q)
      if (q != root) moves.push_back({.from = root, .to = q, .bytes = b.bytes});
  }
  QLOAD_TRY(move(moves));
  if (on_gpus.empty()) return {};
  if (!nccl_) return fail(Errc::kInvalidArgument, "broadcast of GPU memory on a communicator made without GPU slots");
  return detail::nccl_broadcast(*nccl_, on_gpus, root);
}

Status Communicator::scatter(std::span<const std::uint64_t> sizes, std::span<const std::span<const std::byte>> parts,
                             std::span<std::byte> mine, std::uint32_t root) {
  if (root >= size() || sizes.size() != size() || (rank() == root && parts.size() != size()))
    return fail(Errc::kInvalidArgument, fmt::format("scatter from rank {} of {} with {} sizes and {} parts", root,
                                                    size(), sizes.size(), parts.size()));
  if (rank() != root && mine.size() != sizes[rank()])
    return fail(Errc::kInvalidArgument,
                fmt::format("scatter: rank {} expects {} bytes into {}", rank(), sizes[rank()], mine.size()));
  if (rank() == root)
    for (std::uint32_t q = 0; q < size(); ++q)
      if (q != root && parts[q].size() != sizes[q])
        return fail(Errc::kInvalidArgument,
                    fmt::format("scatter: rank {}'s part is {} bytes, where every rank expects {}", q, parts[q].size(),
                                sizes[q]));
  std::vector<HostMove> moves;
  for (std::uint32_t q = 0; q < size(); ++q) {
    if (q == root) continue;
    // Gloo only reads what it sends; the root's parts are const.
    const std::span<std::byte> bytes = rank() == root
                                           ? std::span(const_cast<std::byte*>(parts[q].data()), parts[q].size())
                                           : (q == rank() ? mine : std::span<std::byte>());
    moves.push_back({.from = root, .to = q, .bytes = bytes});
  }
  return move(moves);
}

}  // namespace qload::distributed

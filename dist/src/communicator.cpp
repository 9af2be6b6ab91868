#include "qload/dist/communicator.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace qload {
namespace {

// Host bytes cross the rendezvous in pieces well under its 64 MiB message limit.
constexpr std::size_t kTcpPiece = std::size_t{32} << 20;

}  // namespace

Result<Communicator> Communicator::create(Rendezvous& rendezvous, std::span<const int> gpu_slots,
                                          std::chrono::milliseconds nccl_timeout) {
  std::unique_ptr<detail::NcclGroup, detail::NcclGroupDeleter> nccl;
  if (std::ranges::any_of(gpu_slots, [](int device) { return device >= 0; })) {
    QLOAD_ASSIGN_OR_RETURN(nccl, detail::make_nccl_group(rendezvous, gpu_slots, nccl_timeout));
  }
  return Communicator(rendezvous, std::move(nccl));
}

Result<bool> Communicator::all_ok(bool ok) {
  QLOAD_ASSIGN_OR_RETURN(const std::vector<std::string> all,
                         rendezvous_->allgather(ok ? "1" : "0", std::chrono::milliseconds(0)));
  return std::ranges::all_of(all, [](const std::string& m) { return m == "1"; });
}

Status Communicator::broadcast(std::span<const BroadcastBuffer> buffers, std::uint32_t root) {
  if (root >= size()) return fail(Errc::kInvalidArgument, fmt::format("broadcast from rank {} of {}", root, size()));
  std::vector<BroadcastBuffer> on_gpus;
  for (const BroadcastBuffer& b : buffers) {
    if (b.on_device) {
      on_gpus.push_back(b);
      continue;
    }
    // Host memory: through rank 0, a piece at a time; only the root's message carries bytes.
    for (std::size_t done = 0; done < b.bytes.size();) {
      const std::size_t n = std::min(kTcpPiece, b.bytes.size() - done);
      const std::string_view mine =
          rank() == root ? std::string_view(reinterpret_cast<const char*>(b.bytes.data()) + done, n) : "";
      QLOAD_ASSIGN_OR_RETURN(const std::vector<std::string> all, rendezvous_->allgather(mine));
      if (all[root].size() != n)
        return fail(Errc::kInvalidArgument, fmt::format("broadcast: rank {} sent {} bytes where rank {} expects {}",
                                                        root, all[root].size(), rank(), n));
      if (rank() != root) std::memcpy(b.bytes.data() + done, all[root].data(), n);
      done += n;
    }
  }
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
  const std::uint64_t longest = *std::ranges::max_element(sizes);
  std::vector<std::string_view> to_each(size());
  for (std::uint64_t done = 0; done < longest; done += kTcpPiece) {
    if (rank() == root)
      for (std::uint32_t q = 0; q < size(); ++q) {
        const std::span<const std::byte> part = q == root ? std::span<const std::byte>() : parts[q];
        const std::uint64_t n = done < part.size() ? std::min<std::uint64_t>(kTcpPiece, part.size() - done) : 0;
        to_each[q] = std::string_view(reinterpret_cast<const char*>(part.data()) + (n ? done : 0), n);
      }
    QLOAD_ASSIGN_OR_RETURN(const std::vector<std::string> from, rendezvous_->alltoall(to_each));
    if (rank() == root) continue;
    const std::uint64_t want = done < mine.size() ? std::min<std::uint64_t>(kTcpPiece, mine.size() - done) : 0;
    if (from[root].size() != want)
      return fail(Errc::kInvalidArgument, fmt::format("scatter: rank {} sent {} bytes where rank {} expects {}", root,
                                                      from[root].size(), rank(), want));
    if (want > 0) std::memcpy(mine.data() + done, from[root].data(), static_cast<std::size_t>(want));
  }
  return {};
}

}  // namespace qload

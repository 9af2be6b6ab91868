// Builds without NCCL: GPU memory cannot be broadcast.
#include "qload/distributed/communicator.hpp"

namespace qload::distributed::detail {

struct NcclGroup {};

void NcclGroupDeleter::operator()(NcclGroup* group) const noexcept {
  delete group;
}

Result<std::unique_ptr<NcclGroup, NcclGroupDeleter>> make_nccl_group(Rendezvous&, std::span<const int>,
                                                                     std::chrono::milliseconds,
                                                                     std::span<void* const>) {
  return fail(Errc::kUnsupported, "broadcasting GPU memory needs NCCL, and this build of qload has no NCCL support");
}

Status nccl_broadcast(NcclGroup&, std::span<const BroadcastBuffer>, std::uint32_t) {
  return fail(Errc::kUnsupported, "this build of qload has no NCCL support");
}

}  // namespace qload::distributed::detail

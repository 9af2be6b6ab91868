// Shared reads (ParallelLayout::share_reads): the barrier every process passes once it has
// read, and the GPU copies of SharedReads::kBroadcast, which go through NCCL after it (host
// copies travel during the load: shared_exchange.hpp).
#include <vector>

#include <fmt/format.h>

#include "load/load_internal.hpp"

namespace qload::scheduler::detail {

Status broadcast_gpu_copies(Model& model, const Plan& plan, distributed::Communicator& communicator) {
  // Under a parallel layout without decoding, the model's tensors are each stored tensor's
  // copies in catalog order, in shard order.
  const std::span<const DeviceTensor> tensors = model.tensors();
  std::size_t next = 0;
  std::vector<distributed::BroadcastBuffer> on_gpus;
  for (const TensorPlacement& p : plan.layout.tensors) {
    on_gpus.clear();
    for (std::uint32_t k = p.first_shard; k < p.first_shard + p.shard_count; ++k) {
      if (next >= tensors.size()) return fail(Errc::kInternal, "shared reads: fewer tensors than copies");
      const DeviceTensor& t = tensors[next++];
      if (t.nbytes == 0 || t.host) continue;
      // The model's own arena, filled here before anyone else sees it.
      const std::span bytes(const_cast<std::byte*>(t.data), static_cast<std::size_t>(t.nbytes));
      on_gpus.push_back({.bytes = bytes, .on_device = true, .slot = plan.copies.shards[k].region});
    }
    if (on_gpus.empty()) continue;
    if (Status sent = communicator.broadcast(on_gpus, p.reader); !sent)
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
  Result<bool> everyone = communicator_.all_ok(ok);
  if (!everyone)
    return fail(std::move(everyone.error()).with_note("stage: every rank done reading, before shared tensors move"));
  if (ok && !*everyone)
    return fail(Errc::kCancelled, "another process of the load failed, so the tensors it read cannot arrive");
  return {};
}

}  // namespace qload::scheduler::detail

// NCCL communicators for broadcasting GPU memory between processes. NCCL is opened at run time
// (dlopen of libnccl.so.2, as probe_nccl does), so a binary built with its headers still
// starts on a machine without it. One communicator per device slot: slot k of every process
// forms one NCCL clique, created together (ncclGroupStart/End) from unique ids that rank 0
// makes and hands out over the rendezvous.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "qload/runtime/communicator.hpp"
#include "qload/runtime/cuda.hpp"
#include "qload/runtime/cuda_memory.hpp"

namespace qload::detail {
namespace {

struct NcclApi {
  void* library = nullptr;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
};

template <typename Fn>
bool resolve(void* library, const char* name, Fn& out) {
  out = reinterpret_cast<Fn>(::dlsym(library, name));
  return out != nullptr;
}

Result<NcclApi> open_nccl() {
  NcclApi api;
  // Never unmapped: NCCL leaves threads behind (bootstrap, proxy) that must not outlive its code.
  api.library = ::dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (api.library == nullptr) {
    const char* why = ::dlerror();
    return fail(Errc::kUnsupported,
                fmt::format("broadcasting GPU memory needs NCCL: {}", why ? why : "no libnccl.so.2"));
  }
  const bool all = resolve(api.library, "ncclGetUniqueId", api.get_unique_id) &&
                   resolve(api.library, "ncclCommInitRank", api.comm_init_rank) &&
                   resolve(api.library, "ncclCommDestroy", api.comm_destroy) &&
                   resolve(api.library, "ncclBroadcast", api.broadcast) &&
                   resolve(api.library, "ncclGroupStart", api.group_start) &&
                   resolve(api.library, "ncclGroupEnd", api.group_end) &&
                   resolve(api.library, "ncclGetErrorString", api.error_string);
  if (!all) {
    ::dlclose(api.library);
    return fail(Errc::kUnsupported, "libnccl.so.2 lacks a function qload needs");
  }
  return api;
}

}  // namespace

struct NcclGroup {
  NcclApi api;
  std::vector<int> devices;       // per slot: CUDA device, -1 for a host slot
  std::vector<ncclComm_t> comms;  // per slot: null for a host slot
  std::vector<cuda::Stream> streams;

  Status check(ncclResult_t result, const std::string& what) const {
    if (result == ncclSuccess) return {};
    return fail(Errc::kDevice, fmt::format("{}: {}", what, api.error_string(result)));
  }

  ~NcclGroup() {
    for (ncclComm_t comm : comms)
      if (comm != nullptr) (void)api.comm_destroy(comm);
    streams.clear();
    if (api.library != nullptr) ::dlclose(api.library);  // RTLD_NODELETE: the code stays mapped
  }
};

void NcclGroupDeleter::operator()(NcclGroup* group) const noexcept {
  delete group;
}

Result<std::unique_ptr<NcclGroup, NcclGroupDeleter>> make_nccl_group(Rendezvous& rendezvous,
                                                                     std::span<const int> gpu_slots) {
  const CudaInfo cuda = probe_cuda();
  for (std::size_t k = 0; k < gpu_slots.size(); ++k)
    if (gpu_slots[k] >= 0 && static_cast<std::size_t>(gpu_slots[k]) >= cuda.devices.size())
      return fail(Errc::kUnsupported, fmt::format("NCCL slot {}: cuda:{} is not here ({})", k, gpu_slots[k],
                                                  cuda.devices.empty() ? cuda.unavailable_reason
                                                                       : fmt::format("{} GPUs", cuda.devices.size())));
  std::unique_ptr<NcclGroup, NcclGroupDeleter> group(new NcclGroup);
  QLOAD_ASSIGN_OR_RETURN(group->api, open_nccl());
  const World& world = rendezvous.world();
  group->devices.assign(gpu_slots.begin(), gpu_slots.end());
  group->comms.assign(gpu_slots.size(), nullptr);
  // Rank 0 makes one unique id per slot; every rank learns them.
  std::string ids;
  if (world.rank == 0) {
    ids.resize(gpu_slots.size() * sizeof(ncclUniqueId));
    for (std::size_t k = 0; k < gpu_slots.size(); ++k) {
      ncclUniqueId id;
      QLOAD_TRY(group->check(group->api.get_unique_id(&id), "ncclGetUniqueId"));
      std::memcpy(ids.data() + k * sizeof id, &id, sizeof id);
    }
  }
  QLOAD_ASSIGN_OR_RETURN(const std::vector<std::string> all, rendezvous.allgather(ids));
  if (all[0].size() != gpu_slots.size() * sizeof(ncclUniqueId))
    return fail(Errc::kInvalidArgument,
                fmt::format("rank 0 has {} device slots, rank {} has {}", all[0].size() / sizeof(ncclUniqueId),
                            world.rank, gpu_slots.size()));
  QLOAD_TRY(group->check(group->api.group_start(), "ncclGroupStart"));
  Status made;
  for (std::size_t k = 0; k < gpu_slots.size() && made; ++k) {
    if (gpu_slots[k] < 0) continue;
    if (cudaSetDevice(gpu_slots[k]) != cudaSuccess) {
      made = fail(Errc::kDevice, fmt::format("cudaSetDevice({}) for NCCL slot {}", gpu_slots[k], k));
      break;
    }
    ncclUniqueId id;
    std::memcpy(&id, all[0].data() + k * sizeof id, sizeof id);
    made = group->check(
        group->api.comm_init_rank(&group->comms[k], static_cast<int>(world.size), id, static_cast<int>(world.rank)),
        fmt::format("ncclCommInitRank for slot {} (cuda:{})", k, gpu_slots[k]));
  }
  Status ended = group->check(group->api.group_end(), "ncclGroupEnd (creating communicators)");
  QLOAD_TRY(made);
  QLOAD_TRY(ended);
  for (const int device : gpu_slots) {
    if (device < 0) {
      group->streams.emplace_back();
      continue;
    }
    QLOAD_ASSIGN_OR_RETURN(cuda::Stream stream, cuda::Stream::create(device));
    group->streams.push_back(std::move(stream));
  }
  return group;
}

Status nccl_broadcast(NcclGroup& group, std::span<const BroadcastBuffer> buffers, std::uint32_t root) {
  for (const BroadcastBuffer& b : buffers)
    if (b.slot >= group.comms.size() || group.comms[b.slot] == nullptr)
      return fail(Errc::kInvalidArgument, fmt::format("broadcast on slot {}, which has no GPU communicator", b.slot));
  // One group: a thread driving several communicators must issue their calls together.
  QLOAD_TRY(group.check(group.api.group_start(), "ncclGroupStart"));
  Status issued;
  for (const BroadcastBuffer& b : buffers) {
    issued = group.check(
        group.api.broadcast(b.bytes.data(), b.bytes.data(), b.bytes.size(), ncclUint8, static_cast<int>(root),
                            group.comms[b.slot], static_cast<cudaStream_t>(group.streams[b.slot].handle())),
        fmt::format("ncclBroadcast of {} bytes on slot {}", b.bytes.size(), b.slot));
    if (!issued) break;
  }
  Status ended = group.check(group.api.group_end(), "ncclGroupEnd (broadcast)");
  QLOAD_TRY(issued);
  QLOAD_TRY(ended);
  for (const BroadcastBuffer& b : buffers) QLOAD_TRY(group.streams[b.slot].synchronize());
  return {};
}

}  // namespace qload::detail

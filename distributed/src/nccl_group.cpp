// NCCL communicators for broadcasting GPU memory between processes. NCCL is opened at run time
// (dlopen of libnccl.so.2, as probe_nccl does), so a binary built with its headers still
// starts on a machine without it. One communicator per device slot: slot k of every process
// forms one NCCL clique, created together (ncclGroupStart/End) from unique ids that rank 0
// makes and hands out over the rendezvous; or a server hands in its own communicators, which
// are checked against the world and never destroyed here.
//
// NCCL never gives up by itself: a peer that died or hung leaves a collective spinning on its
// stream forever, and the failure shows only in ncclCommGetAsyncError. So communicators are
// created non-blocking, and every wait (for the creation, for a broadcast) polls both the
// stream and the communicators' asynchronous errors against the nccl_timeout setting. An
// error or a timeout aborts every communicator of the group (which ends the peers' waits with
// errors of their own) and names this rank and the operation.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "qload/distributed/communicator.hpp"
#include "qload/runtime/cuda.hpp"
#include "qload/runtime/cuda_memory.hpp"

namespace qload::distributed::detail {
namespace {

struct NcclApi {
  void* library = nullptr;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRankConfig) comm_init_rank_config = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclCommGetAsyncError) get_async_error = nullptr;
  decltype(&ncclGetLastError) last_error = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  decltype(&ncclCommCount) comm_count = nullptr;
  decltype(&ncclCommUserRank) comm_user_rank = nullptr;
  decltype(&ncclCommCuDevice) comm_cu_device = nullptr;
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
                   resolve(api.library, "ncclCommInitRankConfig", api.comm_init_rank_config) &&
                   resolve(api.library, "ncclCommDestroy", api.comm_destroy) &&
                   resolve(api.library, "ncclCommAbort", api.comm_abort) &&
                   resolve(api.library, "ncclCommGetAsyncError", api.get_async_error) &&
                   resolve(api.library, "ncclGetLastError", api.last_error) &&
                   resolve(api.library, "ncclBroadcast", api.broadcast) &&
                   resolve(api.library, "ncclGroupStart", api.group_start) &&
                   resolve(api.library, "ncclGroupEnd", api.group_end) &&
                   resolve(api.library, "ncclGetErrorString", api.error_string) &&
                   resolve(api.library, "ncclCommCount", api.comm_count) &&
                   resolve(api.library, "ncclCommUserRank", api.comm_user_rank) &&
                   resolve(api.library, "ncclCommCuDevice", api.comm_cu_device);
  if (!all) {
    ::dlclose(api.library);
    return fail(Errc::kUnsupported,
                "libnccl.so.2 lacks a function qload needs (non-blocking communicators need NCCL 2.14 or newer)");
  }
  return api;
}

}  // namespace

struct NcclGroup {
  NcclApi api;
  std::uint32_t rank = 0;
  std::chrono::milliseconds timeout{0};
  std::vector<int> devices;       // per slot: CUDA device, -1 for a host slot
  std::vector<ncclComm_t> comms;  // per slot: null for a host slot (and after an abort)
  std::vector<cuda::Stream> streams;
  bool borrowed = false;  // the communicators are the caller's: aborted on failure, never destroyed
  std::string aborted;    // why the communicators were aborted; empty while they work

  // A call's immediate result: in progress is fine (non-blocking communicators), the rest fails.
  Status check(ncclResult_t result, const std::string& what, ncclComm_t comm = nullptr) {
    if (result == ncclSuccess || result == ncclInProgress) return {};
    return failed(result, what, comm);
  }

  Status failed(ncclResult_t result, const std::string& what, ncclComm_t comm) {
    const char* detail = api.last_error(comm);
    std::string why = fmt::format("rank {}: {}: {}", rank, what, api.error_string(result));
    if (detail != nullptr && *detail != '\0') why += fmt::format(" ({})", detail);
    return abort_all(std::move(why));
  }

  // Aborts every communicator (each peer's wait then ends with an error of its own) and keeps
  // the reason: the group is unusable from here on.
  Status abort_all(std::string why) {
    for (ncclComm_t& comm : comms)
      if (comm != nullptr) (void)api.comm_abort(std::exchange(comm, nullptr));
    aborted = why;
    return fail(Errc::kDevice, fmt::format("{}; the NCCL communicators were aborted", why));
  }

  // Waits until the communicators of `slots` are past ncclInProgress and, with `streams_too`,
  // their streams have run what was issued; an asynchronous error, a stream error or the
  // timeout aborts them all.
  Status wait(std::span<const std::uint32_t> slots, bool streams_too, const std::string& what) {
    const auto start = std::chrono::steady_clock::now();
    auto pause = std::chrono::microseconds(20);
    for (;;) {
      bool pending = false;
      for (const std::uint32_t k : slots) {
        ncclResult_t async = ncclSuccess;
        if (const ncclResult_t r = api.get_async_error(comms[k], &async); r != ncclSuccess)
          return failed(r, fmt::format("{} on slot {} (cuda:{}): ncclCommGetAsyncError", what, k, devices[k]),
                        comms[k]);
        if (async == ncclInProgress) {
          pending = true;
          continue;
        }
        if (async != ncclSuccess)
          return failed(async, fmt::format("{} on slot {} (cuda:{})", what, k, devices[k]), comms[k]);
        if (!streams_too) continue;
        const cudaError_t q = cudaStreamQuery(static_cast<cudaStream_t>(streams[k].handle()));
        if (q == cudaErrorNotReady) {
          pending = true;
        } else if (q != cudaSuccess) {
          return abort_all(fmt::format("rank {}: {} on slot {} (cuda:{}): the stream failed: {}", rank, what, k,
                                       devices[k], cudaGetErrorString(q)));
        }
      }
      if (!pending) return {};
      const auto waited = std::chrono::steady_clock::now() - start;
      if (waited >= timeout)
        return abort_all(
            fmt::format("rank {}: {}: not done after {} ms (the nccl_timeout setting): a peer is gone, "
                        "hung, or still far behind",
                        rank, what, timeout.count()));
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(2));
    }
  }

  ~NcclGroup() {
    for (ncclComm_t comm : comms)
      if (comm != nullptr && !borrowed) (void)api.comm_destroy(comm);
    streams.clear();
    if (api.library != nullptr) ::dlclose(api.library);  // RTLD_NODELETE: the code stays mapped
  }
};

void NcclGroupDeleter::operator()(NcclGroup* group) const noexcept {
  delete group;
}

namespace {

// Checks the caller's communicators against the world and the slots' devices, and adopts them.
Status adopt_communicators(NcclGroup& group, const World& world, std::span<const int> gpu_slots,
                           std::span<void* const> borrowed) {
  group.borrowed = true;
  for (std::size_t k = 0; k < gpu_slots.size(); ++k) {
    auto* comm = static_cast<ncclComm_t>(borrowed[k]);
    if (gpu_slots[k] < 0 || comm == nullptr) {
      if (gpu_slots[k] >= 0 || comm != nullptr)
        return fail(Errc::kInvalidArgument,
                    fmt::format("NCCL slot {} ({}): a communicator is needed for each GPU slot and none for a "
                                "host slot",
                                k, gpu_slots[k] < 0 ? std::string("host") : fmt::format("cuda:{}", gpu_slots[k])));
      continue;
    }
    int count = 0, rank = 0, device = 0;
    const std::string what = fmt::format("the NCCL communicator handed in for slot {} (cuda:{})", k, gpu_slots[k]);
    if (group.api.comm_count(comm, &count) != ncclSuccess || group.api.comm_user_rank(comm, &rank) != ncclSuccess ||
        group.api.comm_cu_device(comm, &device) != ncclSuccess)
      return fail(Errc::kInvalidArgument, fmt::format("{}: NCCL does not know it", what));
    if (static_cast<std::uint32_t>(count) != world.size || static_cast<std::uint32_t>(rank) != world.rank ||
        device != gpu_slots[k])
      return fail(Errc::kInvalidArgument,
                  fmt::format("{} is rank {} of {} on cuda:{}, where this process is rank {} of {} on cuda:{}", what,
                              rank, count, device, world.rank, world.size, gpu_slots[k]));
    group.comms[k] = comm;
  }
  return {};
}

// Each GPU slot's device is one of this machine's.
Status check_devices_exist(std::span<const int> gpu_slots) {
  const CudaInfo cuda = probe_cuda();
  for (std::size_t k = 0; k < gpu_slots.size(); ++k)
    if (gpu_slots[k] >= 0 && static_cast<std::size_t>(gpu_slots[k]) >= cuda.devices.size())
      return fail(Errc::kUnsupported, fmt::format("NCCL slot {}: cuda:{} is not here ({})", k, gpu_slots[k],
                                                  cuda.devices.empty() ? cuda.unavailable_reason
                                                                       : fmt::format("{} GPUs", cuda.devices.size())));
  return {};
}

// One stream per slot: a CUDA stream on a GPU slot's device, an empty one for a host slot.
Status make_streams(NcclGroup& group, std::span<const int> gpu_slots) {
  for (int device : gpu_slots) {
    if (device < 0) {
      group.streams.emplace_back();
      continue;
    }
    QLOAD_ASSIGN_OR_RETURN(cuda::Stream stream, cuda::Stream::create(device));
    group.streams.push_back(std::move(stream));
  }
  return {};
}

// Every rank says whether it hands in its own communicators; all must agree (the exchanges
// that follow differ), and a rank whose communicators do not fit says so to the others.
Status agree_on_communicators(NcclGroup& group, Rendezvous& rendezvous, std::span<const int> gpu_slots,
                              std::span<void* const> borrowed) {
  const World& world = rendezvous.world();
  Status adopted;
  if (!borrowed.empty()) adopted = adopt_communicators(group, world, gpu_slots, borrowed);
  const std::string mode = borrowed.empty() ? "own" : adopted ? "borrowed" : "refused";
  QLOAD_ASSIGN_OR_RETURN(const std::vector<std::string> modes, rendezvous.allgather(mode));
  if (!adopted) {
    group.comms.assign(gpu_slots.size(), nullptr);  // not ours to abort: nothing ran on them
    return fail(std::move(adopted.error()));
  }
  for (std::uint32_t r = 0; r < modes.size(); ++r) {
    if (modes[r] == mode) continue;
    group.comms.assign(gpu_slots.size(), nullptr);
    if (modes[r] == "refused")
      return fail(Errc::kCancelled, fmt::format("rank {}'s NCCL communicators do not fit the world", r));
    return fail(Errc::kInvalidArgument, fmt::format("rank {} {} NCCL communicators, where rank {} {}", r,
                                                    modes[r] == "own" ? "makes its own" : "hands in its", world.rank,
                                                    mode == "own" ? "makes its own" : "hands in its"));
  }
  return {};
}

// Rank 0 makes one unique id per slot; every rank learns them (rank 0's ids, one after another).
Result<std::string> share_unique_ids(NcclGroup& group, Rendezvous& rendezvous, std::span<const int> gpu_slots) {
  const World& world = rendezvous.world();
  std::string ids;
  if (world.rank == 0) {
    ids.resize(gpu_slots.size() * sizeof(ncclUniqueId));
    for (std::size_t k = 0; k < gpu_slots.size(); ++k) {
      ncclUniqueId id;
      QLOAD_TRY(group.check(group.api.get_unique_id(&id), "ncclGetUniqueId"));
      std::memcpy(ids.data() + k * sizeof id, &id, sizeof id);
    }
  }
  QLOAD_ASSIGN_OR_RETURN(std::vector<std::string> all, rendezvous.allgather(ids));
  if (all[0].size() != gpu_slots.size() * sizeof(ncclUniqueId))
    return fail(Errc::kInvalidArgument,
                fmt::format("rank 0 has {} device slots, rank {} has {}", all[0].size() / sizeof(ncclUniqueId),
                            world.rank, gpu_slots.size()));
  return std::move(all[0]);
}

// Creates the GPU slots' communicators together (one NCCL group) from rank 0's `ids` and waits
// for them against the timeout; a failure aborts them all.
Status create_communicators(NcclGroup& group, const World& world, std::span<const int> gpu_slots,
                            const std::string& ids) {
  std::vector<std::uint32_t> gpu_slot_indices;
  QLOAD_TRY(group.check(group.api.group_start(), "ncclGroupStart"));
  Status made;
  for (std::size_t k = 0; k < gpu_slots.size() && made; ++k) {
    if (gpu_slots[k] < 0) continue;
    gpu_slot_indices.push_back(static_cast<std::uint32_t>(k));
    if (cudaSetDevice(gpu_slots[k]) != cudaSuccess) {
      made = fail(Errc::kDevice, fmt::format("cudaSetDevice({}) for NCCL slot {}", gpu_slots[k], k));
      break;
    }
    ncclUniqueId id;
    std::memcpy(&id, ids.data() + k * sizeof id, sizeof id);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // waited for below, against the timeout
    made = group.check(group.api.comm_init_rank_config(&group.comms[k], static_cast<int>(world.size), id,
                                                       static_cast<int>(world.rank), &config),
                       fmt::format("ncclCommInitRankConfig for slot {} (cuda:{})", k, gpu_slots[k]), group.comms[k]);
  }
  Status ended = group.check(group.api.group_end(), "ncclGroupEnd (creating communicators)");
  if (!made) {
    if (group.aborted.empty()) (void)group.abort_all("creating the NCCL communicators failed");
    return fail(std::move(made.error()));
  }
  QLOAD_TRY(ended);
  QLOAD_TRY(
      group.wait(gpu_slot_indices, false, fmt::format("creating the NCCL communicators of {} ranks", world.size)));
  return {};
}

}  // namespace

Result<std::unique_ptr<NcclGroup, NcclGroupDeleter>> make_nccl_group(Rendezvous& rendezvous,
                                                                     std::span<const int> gpu_slots,
                                                                     std::chrono::milliseconds timeout,
                                                                     std::span<void* const> borrowed) {
  QLOAD_TRY(check_devices_exist(gpu_slots));
  std::unique_ptr<NcclGroup, NcclGroupDeleter> group(new NcclGroup);
  QLOAD_ASSIGN_OR_RETURN(group->api, open_nccl());
  const World& world = rendezvous.world();
  group->rank = world.rank;
  group->timeout = timeout;
  group->devices.assign(gpu_slots.begin(), gpu_slots.end());
  group->comms.assign(gpu_slots.size(), nullptr);
  QLOAD_TRY(make_streams(*group, gpu_slots));
  QLOAD_TRY(agree_on_communicators(*group, rendezvous, gpu_slots, borrowed));
  if (group->borrowed) return group;
  QLOAD_ASSIGN_OR_RETURN(const std::string ids, share_unique_ids(*group, rendezvous, gpu_slots));
  QLOAD_TRY(create_communicators(*group, world, gpu_slots, ids));
  return group;
}

Status nccl_broadcast(NcclGroup& group, std::span<const BroadcastBuffer> buffers, std::uint32_t root) {
  if (!group.aborted.empty())
    return fail(Errc::kDevice, fmt::format("NCCL communicators aborted earlier ({})", group.aborted));
  std::vector<std::uint32_t> slots;
  std::size_t bytes = 0;
  for (const BroadcastBuffer& b : buffers) {
    if (b.slot >= group.comms.size() || group.comms[b.slot] == nullptr)
      return fail(Errc::kInvalidArgument, fmt::format("broadcast on slot {}, which has no GPU communicator", b.slot));
    slots.push_back(b.slot);
    bytes += b.bytes.size();
  }
  const std::string what = fmt::format("ncclBroadcast of {} bytes from rank {}", bytes, root);
  // One group: a thread driving several communicators must issue their calls together.
  QLOAD_TRY(group.check(group.api.group_start(), "ncclGroupStart"));
  Status issued;
  for (const BroadcastBuffer& b : buffers) {
    issued = group.check(
        group.api.broadcast(b.bytes.data(), b.bytes.data(), b.bytes.size(), ncclUint8, static_cast<int>(root),
                            group.comms[b.slot], static_cast<cudaStream_t>(group.streams[b.slot].handle())),
        fmt::format("{} on slot {}", what, b.slot), group.comms[b.slot]);
    if (!issued) break;
  }
  Status ended = group.check(group.api.group_end(), fmt::format("ncclGroupEnd ({})", what));
  QLOAD_TRY(issued);
  QLOAD_TRY(ended);
  return group.wait(slots, true, what);
}

}  // namespace qload::distributed::detail

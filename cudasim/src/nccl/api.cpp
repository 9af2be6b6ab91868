// The simulated NCCL's entry points (cudasim/include/nccl.h), built as libnccl.so.2.
//
// A communicator connects to its clique's hub (hub.cpp) when it is created; creation finishes
// on a thread of its own, so a non-blocking communicator reports ncclInProgress until the
// clique is complete, and a blocking one waits (at the call, or at ncclGroupEnd inside a
// group). A collective is checked when issued (device memory of the communicator's device,
// large enough; a stream of that device) and runs on that stream's engine thread when the
// stream reaches it, reading and writing the buffers then. After a failure (or an injected
// hang) it does not return until the communicator is aborted, and the failure is visible only
// through ncclCommGetAsyncError: as on a GPU, synchronising the stream alone waits forever.
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "nccl.h"
#include "sim_state.hpp"
#include "wire.hpp"

using qload::cudasim::Engine;
using qload::cudasim::Fault;
using qload::cudasim::MemoryKind;
using qload::cudasim::Operation;
using qload::cudasim::Range;
using qload::cudasim::State;
namespace wire = qload::cudasim::nccl;

namespace {

std::size_t type_size(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
  }
}

// One rank's communicator. Shared with the operations queued on streams, which may outlive
// the handle after an abort.
struct CommState {
  int nranks = 0;
  int rank = 0;
  int device = 0;
  bool blocking = true;
  int fd = -1;  // to the hub; shut down (not closed) by abort, so blocked I/O returns
  std::thread joining;
  std::uint64_t issued = 0;  // collectives issued so far (their sequence numbers)
  std::atomic<int> in_flight{0};

  std::mutex mutex;  // below
  std::condition_variable changed;
  ncclResult_t state = ncclInProgress;
  std::string last_error;
  bool aborted = false;

  ~CommState() {
    if (joining.joinable()) joining.join();
    if (fd >= 0) ::close(fd);
  }

  ncclResult_t status() {
    std::lock_guard lock(mutex);
    return state;
  }

  // Records a failure (the first one stays), and tells the hub by hanging up on it.
  void fail(ncclResult_t result, const std::string& why) {
    {
      std::lock_guard lock(mutex);
      if (state == ncclSuccess || state == ncclInProgress) {
        state = result;
        last_error = why;
      }
    }
    ::shutdown(fd, SHUT_RDWR);
    changed.notify_all();
  }

  // What a failed or hung collective does: nothing, until the communicator is aborted.
  void wait_for_abort() {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return aborted; });
  }

  void abort() {
    {
      std::lock_guard lock(mutex);
      aborted = true;
    }
    ::shutdown(fd, SHUT_RDWR);
    changed.notify_all();
  }

  bool is_aborted() {
    std::lock_guard lock(mutex);
    return aborted;
  }

  // Creation, on `joining`: waits for the hub to say the clique is complete.
  void join_clique() {
    wire::Reply reply;
    if (!wire::recv_all(fd, &reply, sizeof reply)) {
      if (!is_aborted()) fail(ncclRemoteError, "the clique's hub went away while the communicator was being created");
      return;
    }
    if (reply.status != ncclSuccess) {
      fail(static_cast<ncclResult_t>(reply.status), reply.message);
      return;
    }
    std::lock_guard lock(mutex);
    if (state == ncclInProgress) state = ncclSuccess;
  }
};

struct Broadcast {
  std::shared_ptr<CommState> comm;
  std::shared_ptr<Engine> engine;
  const std::byte* send = nullptr;
  std::byte* recv = nullptr;
  std::size_t bytes = 0;
  int root = 0;
  std::uint64_t seq = 0;
  bool inject_error = false;
  bool inject_hang = false;

  // On the stream's engine thread, when the stream reaches it.
  void run() const {
    CommState& c = *comm;
    struct Done {
      CommState& c;
      ~Done() { c.in_flight--; }
    } done{c};
    if (c.is_aborted()) return;
    if (inject_hang) return c.wait_for_abort();
    if (inject_error) {
      c.fail(ncclSystemError,
             fmt::format("ncclBroadcast {} on cuda:{}: injected failure (QLOAD_CUDASIM_FAULTS)", seq, c.device));
      return c.wait_for_abort();
    }
    if (c.status() != ncclSuccess) return c.wait_for_abort();
    const wire::OpHeader header{.seq = seq, .kind = wire::OpKind::kBroadcast, .root = root, .bytes = bytes};
    const bool is_root = c.rank == root;
    bool ok = wire::send_all(c.fd, &header, sizeof header) && (!is_root || wire::send_all(c.fd, send, bytes));
    wire::Reply reply;
    ok = ok && wire::recv_all(c.fd, &reply, sizeof reply);
    if (ok && reply.status != ncclSuccess) {
      c.fail(static_cast<ncclResult_t>(reply.status), reply.message);
      return c.wait_for_abort();
    }
    ok = ok && (is_root || wire::recv_all(c.fd, recv, bytes));
    if (!ok) {
      if (c.is_aborted()) return;
      c.fail(ncclRemoteError, fmt::format("ncclBroadcast {}: the connection to the clique broke (a peer left)", seq));
      return c.wait_for_abort();
    }
    if (is_root && send != recv) std::memmove(recv, send, bytes);
  }
};

// ncclGroupStart/End, per thread: creations and collectives issued inside a group take effect
// at its end.
struct Group {
  int depth = 0;
  std::vector<std::shared_ptr<CommState>> created;
  std::vector<Broadcast> broadcasts;
};
thread_local Group group;

thread_local std::string last_error_text;

ncclResult_t usage(const std::string& why) {
  last_error_text = why;
  return ncclInvalidUsage;
}

ncclResult_t invalid(const std::string& why) {
  last_error_text = why;
  return ncclInvalidArgument;
}

void enqueue(const Broadcast& b) {
  b.engine->enqueue(Operation{.what = "ncclBroadcast", .run = [b] { b.run(); }});
}

// Blocking creation: waits for the clique (its joining thread).
ncclResult_t finish_blocking(const std::shared_ptr<CommState>& c) {
  if (c->joining.joinable()) c->joining.join();
  return c->status();
}

}  // namespace

// The handle: the state stays alive for queued operations after it is destroyed or aborted.
struct ncclComm {
  std::shared_ptr<CommState> state;
};

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return invalid("ncclGetVersion: null");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  if (comm != nullptr) {
    std::lock_guard lock(comm->state->mutex);
    if (!comm->state->last_error.empty()) last_error_text = comm->state->last_error;
  }
  return last_error_text.c_str();
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return invalid("ncclGetUniqueId: null");
  static std::atomic<unsigned> counter{0};
  const std::string name = fmt::format("qload-ncclsim-{}-{}-{:016x}", ::getpid(), counter++, std::random_device{}());
  const int fd = wire::listen_abstract(name);
  if (fd < 0) {
    last_error_text = fmt::format("ncclGetUniqueId: cannot listen on @{}: {}", name, std::strerror(errno));
    return ncclSystemError;
  }
  wire::start_hub(fd);
  std::memset(id->internal, 0, sizeof id->internal);
  std::memcpy(id->internal, wire::kIdMagic, sizeof wire::kIdMagic);
  std::memcpy(id->internal + sizeof wire::kIdMagic, name.data(),
              std::min(name.size(), sizeof id->internal - sizeof wire::kIdMagic - 1));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  if (comm == nullptr) return invalid("ncclCommInitRank: null communicator pointer");
  *comm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return invalid(fmt::format("ncclCommInitRank: rank {} of {} ranks", rank, nranks));
  if (std::memcmp(id.internal, wire::kIdMagic, sizeof wire::kIdMagic) != 0)
    return invalid("ncclCommInitRank: not a unique id from ncclGetUniqueId");
  bool blocking = true;
  if (config != nullptr) {
    if (config->size != sizeof(ncclConfig_t) || config->magic != 0xcafebeef)
      return invalid("ncclCommInitRankConfig: the config was not initialised with NCCL_CONFIG_INITIALIZER");
    blocking = config->blocking != 0;  // undefined (INT_MIN) means blocking, as NCCL's default
  }
  State& s = State::get();
  const int device = qload::cudasim::current_device();
  bool inject = false;
  {
    std::lock_guard lock(s.mutex);
    if (device < 0 || device >= s.config.devices) return invalid(fmt::format("ncclCommInitRank: no cuda:{}", device));
    s.devices[static_cast<std::size_t>(device)].context = true;
    inject = s.fault_fires(Fault::kNcclInit, device);
  }
  auto c = std::make_shared<CommState>();
  c->nranks = nranks;
  c->rank = rank;
  c->device = device;
  c->blocking = blocking;
  const std::string name(id.internal + sizeof wire::kIdMagic);
  if (inject) {
    c->state = ncclSystemError;
    c->last_error = fmt::format("ncclCommInitRank on cuda:{}: injected failure (QLOAD_CUDASIM_FAULTS)", device);
  } else if (c->fd = wire::connect_abstract(name); c->fd < 0) {
    c->state = ncclSystemError;
    c->last_error = fmt::format("ncclCommInitRank: cannot reach the clique at @{}: {}", name, std::strerror(errno));
  } else {
    const wire::Hello hello{.nranks = nranks, .rank = rank, .device = device, .pid = ::getpid()};
    if (!wire::send_all(c->fd, &hello, sizeof hello)) {
      c->state = ncclSystemError;
      c->last_error = "ncclCommInitRank: the clique's hub hung up";
    } else {
      c->joining = std::thread([raw = c.get()] { raw->join_clique(); });
    }
  }
  *comm = new ncclComm{c};
  if (group.depth > 0) {
    group.created.push_back(c);
    return ncclSuccess;
  }
  if (!blocking) {
    const ncclResult_t now = c->status();
    return now == ncclSuccess ? ncclInProgress : now;  // ready or not, the caller polls
  }
  const ncclResult_t result = finish_blocking(c);
  if (result != ncclSuccess) {
    last_error_text = c->last_error;
    delete *comm;
    *comm = nullptr;
  }
  return result;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  if (comm == nullptr || error == nullptr) return invalid("ncclCommGetAsyncError: null");
  *error = comm->state->status();
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr || count == nullptr) return invalid("ncclCommCount: null");
  *count = comm->state->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (comm == nullptr || device == nullptr) return invalid("ncclCommCuDevice: null");
  *device = comm->state->device;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr || rank == nullptr) return invalid("ncclCommUserRank: null");
  *rank = comm->state->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  comm->state->abort();
  if (comm->state->joining.joinable()) comm->state->joining.join();
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  CommState& c = *comm->state;
  // Destroying is for a communicator at rest; one with work in flight (or still joining)
  // needs ncclCommAbort, or the caller to wait for its streams first.
  const int pending = c.in_flight.load();
  const ncclResult_t state = c.status();
  if (pending > 0 || state == ncclInProgress) {
    State::get().report(fmt::format(
        "ncclCommDestroy(rank {} on cuda:{}) with {}: wait for its streams (or the creation) first, or "
        "ncclCommAbort it",
        c.rank, c.device, pending > 0 ? fmt::format("{} collectives in flight", pending) : "its creation unfinished"));
    return ncclCommAbort(comm);
  }
  c.abort();  // hangs up on the hub: this rank has left
  if (c.joining.joinable()) c.joining.join();
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  if (comm == nullptr) return invalid("ncclBroadcast: null communicator");
  const std::shared_ptr<CommState>& c = comm->state;
  if (const ncclResult_t state = c->status(); state != ncclSuccess)
    return usage(fmt::format("ncclBroadcast on a communicator that is {}",
                             state == ncclInProgress ? "still being created" : "broken"));
  const std::size_t element = type_size(datatype);
  if (element == 0) return invalid(fmt::format("ncclBroadcast: data type {}", static_cast<int>(datatype)));
  if (root < 0 || root >= c->nranks) return invalid(fmt::format("ncclBroadcast: root {} of {} ranks", root, c->nranks));
  const std::size_t bytes = count * element;
  State& s = State::get();
  Broadcast b{.comm = c,
              .send = static_cast<const std::byte*>(sendbuff),
              .recv = static_cast<std::byte*>(recvbuff),
              .bytes = bytes,
              .root = root};
  std::string wrong;
  {
    std::lock_guard lock(s.mutex);
    // Both buffers in device memory of the communicator's device, as NCCL's kernels need.
    const auto check = [&](const void* p, const char* which) -> std::string {
      const Range* r = s.find(p, bytes);
      if (r != nullptr && r->kind == MemoryKind::kDevice && r->device == c->device) return "";
      return fmt::format("ncclBroadcast (rank {}, cuda:{}): {} {} ({} bytes) is not device memory of cuda:{}", c->rank,
                         c->device, which, p, bytes, c->device);
    };
    wrong = check(recvbuff, "recvbuff");
    if (wrong.empty() && c->rank == root) wrong = check(sendbuff, "sendbuff");
    if (wrong.empty() && stream != nullptr && stream->engine->device() != c->device)
      wrong = fmt::format("ncclBroadcast (rank {}, cuda:{}) on a stream of cuda:{}", c->rank, c->device,
                          stream->engine->device());
    if (wrong.empty()) {
      b.engine = stream != nullptr ? stream->engine : s.legacy_stream(c->device)->engine;
      b.inject_error = s.fault_fires(Fault::kNcclError, c->device);
      b.inject_hang = !b.inject_error && s.fault_fires(Fault::kNcclHang, c->device);
    }
  }
  if (!wrong.empty()) {
    s.report(wrong);
    return invalid(wrong);
  }
  b.seq = ++c->issued;
  c->in_flight++;
  if (group.depth > 0)
    group.broadcasts.push_back(std::move(b));
  else
    enqueue(b);
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  group.depth++;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group.depth == 0) return usage("ncclGroupEnd without ncclGroupStart");
  if (--group.depth > 0) return ncclSuccess;
  for (const Broadcast& b : group.broadcasts) enqueue(b);
  group.broadcasts.clear();
  std::vector<std::shared_ptr<CommState>> created = std::move(group.created);
  group.created.clear();
  ncclResult_t result = ncclSuccess;
  for (const auto& c : created) {
    const ncclResult_t r = c->blocking ? finish_blocking(c) : c->status();
    if (r == ncclInProgress && result == ncclSuccess) result = ncclInProgress;
    if (r != ncclSuccess && r != ncclInProgress && (result == ncclSuccess || result == ncclInProgress)) {
      result = r;
      last_error_text = c->last_error;
    }
  }
  return result;
}

}  // extern "C"

// NCCL broadcasts through Communicator (runtime/communicator.hpp) and shared reads onto GPUs.
// One GPU: a world of one process broadcasts to itself (NCCL opened, a communicator made, a
// broadcast issued and waited for). Two or more: two ranks (threads, cuda:0 and cuda:1) send
// bytes from one GPU to the other, and two replicas sharing reads each hold the whole
// checkpoint. Tensor-parallel shards relayed onto one GPU (two processes as threads on cuda:0)
// match the reference. Without a GPU: a GPU slot is refused with an error, never a crash or a
// hang.
#include <catch2/catch.hpp>

#include <dlfcn.h>
#ifdef QLOAD_TEST_HAVE_NCCL_H
#include <nccl.h>
#endif

#include <future>
#include <numeric>

#include "qload/distributed/communicator.hpp"
#include "qload/runtime/cuda.hpp"
#include "qload/runtime/cuda_memory.hpp"
#include "qload/runtime/nccl.hpp"
#include "qload/scheduler/load.hpp"
#include "support/free_port.hpp"
#include "support/llama_checkpoint.hpp"

using namespace qload;
using namespace qload::testing;
using namespace std::chrono_literals;

namespace {

std::vector<std::byte> pattern(std::size_t n, int seed) {
  std::vector<std::byte> out(n);
  for (std::size_t i = 0; i < n; ++i)
    out[i] = static_cast<std::byte>((i * 131 + static_cast<std::size_t>(seed)) & 0xff);
  return out;
}

// Rank `rank` of `size` broadcasts (root 0) one device buffer of `bytes` on cuda:`rank`;
// returns what the buffer holds afterwards.
Result<std::vector<std::byte>> broadcast_on_gpu(std::uint32_t rank, std::uint32_t size, std::uint16_t port,
                                                std::size_t bytes) {
  QLOAD_ASSIGN_OR_RETURN(
      distributed::Rendezvous rv,
      distributed::Rendezvous::join(
          distributed::World{.rank = rank, .size = size, .local_rank = rank, .local_size = size, .master_port = port},
          60s));
  const int device = static_cast<int>(rank);
  const std::vector<int> slots = {device};
  QLOAD_ASSIGN_OR_RETURN(distributed::Communicator comm, distributed::Communicator::create(rv, slots));
  QLOAD_ASSIGN_OR_RETURN(cuda::DeviceBuffer buffer, cuda::DeviceBuffer::allocate(device, bytes));
  const std::vector<std::byte> mine = pattern(bytes, static_cast<int>(rank) + 1);
  QLOAD_TRY(cuda::copy_to_device(buffer.data(), mine.data(), bytes, device));
  const distributed::BroadcastBuffer b{.bytes = std::span(buffer.data(), bytes), .on_device = true, .slot = 0};
  QLOAD_TRY(comm.broadcast(std::span(&b, 1), 0));
  std::vector<std::byte> out(bytes);
  QLOAD_TRY(cuda::copy_to_host(out.data(), buffer.data(), bytes, device));
  return out;
}

// Every tensor's copy on `device` (read back to the host) against the reference: tensor rank
// `rank` of `tp`, converted to f32 or not. One line per mismatch.
Result<std::vector<std::string>> copy_mismatches(const Llama& m, const scheduler::Model& model,
                                                 const std::string& device, std::uint64_t rank, std::uint64_t tp,
                                                 bool convert) {
  std::vector<std::string> mismatches;
  for (const auto& [name, shape] : m.shapes) {
    const scheduler::DeviceTensor* t = model.find(name, device);
    if (t == nullptr) return fail(Errc::kNotFound, name);
    std::vector<std::byte> host(t->nbytes);
    QLOAD_TRY(model.copy_to_host(*t, 0, host));
    scheduler::DeviceTensor on_host = *t;
    on_host.data = host.data();
    if (std::string why = copy_mismatch(m, name, on_host, rank, tp, convert); !why.empty())
      mismatches.push_back(name + ": " + why);
  }
  return mismatches;
}

// Runs `rank(0)` and `rank(1)` at once (two processes, as threads); each must find nothing wrong.
template <typename Rank>
void expect_both_clean(Rank rank) {
  auto zero = std::async(std::launch::async, rank, 0u);
  auto one = std::async(std::launch::async, rank, 1u);
  for (auto* f : {&zero, &one}) {
    auto mismatches = f->get();
    if (!mismatches) FAIL(mismatches.error().to_string());
    CHECK(mismatches->empty());
  }
}

#ifdef QLOAD_TEST_HAVE_NCCL_H
// What a server does with NCCL itself, opened at run time as qload does (the tests do not link
// NCCL): the simulated one under QLOAD_CUDA_SIM, the real one on a GPU machine.
struct ServerNccl {
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclCommCount) comm_count = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;

  static std::optional<ServerNccl> open() {
    void* library = ::dlopen("libnccl.so.2", RTLD_NOW | RTLD_NODELETE);
    if (library == nullptr) return std::nullopt;
    ServerNccl n;
    n.get_unique_id = reinterpret_cast<decltype(n.get_unique_id)>(::dlsym(library, "ncclGetUniqueId"));
    n.comm_init_rank = reinterpret_cast<decltype(n.comm_init_rank)>(::dlsym(library, "ncclCommInitRank"));
    n.comm_count = reinterpret_cast<decltype(n.comm_count)>(::dlsym(library, "ncclCommCount"));
    n.comm_destroy = reinterpret_cast<decltype(n.comm_destroy)>(::dlsym(library, "ncclCommDestroy"));
    if (!n.get_unique_id || !n.comm_init_rank || !n.comm_count || !n.comm_destroy) return std::nullopt;
    return n;
  }
};
#endif

}  // namespace

TEST_CASE("communicator: a server's own NCCL communicators carry the broadcast and stay the server's", "[gpu][nccl]") {
  const CudaInfo info = probe_cuda();
  if (info.devices.empty()) {
    WARN("SKIPPED [gpu]: no GPU visible: " << info.unavailable_reason);
    return;
  }
#ifndef QLOAD_TEST_HAVE_NCCL_H
  WARN("SKIPPED [gpu]: this build has no nccl.h to play a server with");
#else
  const std::optional<ServerNccl> nccl = ServerNccl::open();
  if (!nccl) {
    WARN("SKIPPED [gpu]: no NCCL library here");
    return;
  }
  const std::uint32_t size = info.devices.size() >= 2 ? 2 : 1;
  ncclUniqueId id{};
  REQUIRE(nccl->get_unique_id(&id) == ncclSuccess);
  const std::uint16_t port = free_port();
  constexpr std::size_t kBytes = std::size_t{3} << 20;
  // Rank r: the server makes its communicator on cuda:r, hands it to qload for a broadcast,
  // and after qload is done with it, the communicator is still the server's to use and destroy.
  const auto rank = [&](std::uint32_t r) -> Result<std::vector<std::string>> {
    std::vector<std::string> wrong;
    const int device = static_cast<int>(r);
    QLOAD_TRY(cuda::make_current(device));
    ncclComm_t server_comm = nullptr;
    if (nccl->comm_init_rank(&server_comm, static_cast<int>(size), id, static_cast<int>(r)) != ncclSuccess)
      return fail(Errc::kDevice, "the server's ncclCommInitRank failed");
    {
      QLOAD_ASSIGN_OR_RETURN(
          distributed::Rendezvous rv,
          distributed::Rendezvous::join(
              distributed::World{.rank = r, .size = size, .local_rank = r, .local_size = size, .master_port = port},
              60s));
      const std::vector<int> slots = {device};
      const std::vector<void*> comms = {server_comm};
      QLOAD_ASSIGN_OR_RETURN(distributed::Communicator comm, distributed::Communicator::create(rv, slots, {}, comms));
      QLOAD_ASSIGN_OR_RETURN(cuda::DeviceBuffer buffer, cuda::DeviceBuffer::allocate(device, kBytes));
      const std::vector<std::byte> mine = pattern(kBytes, static_cast<int>(r) + 1);
      QLOAD_TRY(cuda::copy_to_device(buffer.data(), mine.data(), kBytes, device));
      const distributed::BroadcastBuffer b{.bytes = std::span(buffer.data(), kBytes), .on_device = true, .slot = 0};
      QLOAD_TRY(comm.broadcast(std::span(&b, 1), 0));
      std::vector<std::byte> out(kBytes);
      QLOAD_TRY(cuda::copy_to_host(out.data(), buffer.data(), kBytes, device));
      if (out != pattern(kBytes, 1)) wrong.push_back(fmt::format("rank {} does not hold rank 0's bytes", r));
      // Handed in for a slot of another device, it is refused by name on every rank (on a
      // machine with a device past every rank's: without one, the slot itself is refused
      // first; every rank asks, or none).
      if (info.devices.size() > size) {
        const std::vector<int> elsewhere = {device + 1};
        Result<distributed::Communicator> refused = distributed::Communicator::create(rv, elsewhere, {}, comms);
        if (refused)
          wrong.push_back("a communicator on another device was taken");
        else if (refused.error().message().find(fmt::format("where this process is rank {} of {} on cuda:{}", r, size,
                                                            device + 1)) == std::string::npos)
          wrong.push_back("refused, but not by name: " + refused.error().to_string());
      }
    }
    int count = 0;
    if (nccl->comm_count(server_comm, &count) != ncclSuccess || count != static_cast<int>(size))
      wrong.push_back("qload destroyed the server's communicator");
    if (nccl->comm_destroy(server_comm) != ncclSuccess)
      wrong.push_back("the server could not destroy its communicator");
    return wrong;
  };
  if (size == 1) {
    auto alone = rank(0);
    if (!alone) FAIL(alone.error().to_string());
    CHECK(alone->empty());
    return;
  }
  expect_both_clean(rank);
#endif
}

TEST_CASE("communicator: GPU memory is broadcast through NCCL", "[gpu][nccl]") {
  const CudaInfo info = probe_cuda();
  if (info.devices.empty()) {
    WARN("SKIPPED [gpu]: no GPU visible: " << info.unavailable_reason);
    auto rv = distributed::Rendezvous::join(distributed::World{}, 1s);
    REQUIRE(rv);
    const std::vector<int> slots = {0};
    auto comm = distributed::Communicator::create(*rv, slots);
    REQUIRE_FALSE(comm);  // no NCCL, or NCCL without a GPU: an error, not a crash
    return;
  }
  // GPU machines may have NCCL only inside a Python environment (the nvidia-nccl wheels), off
  // the loader's path: that is a skip, not a failure (bench/gpu.sh points LD_LIBRARY_PATH at it).
  if (const NcclInfo nccl = probe_nccl(); nccl.library_version == 0) {
    WARN("SKIPPED [gpu]: no NCCL library here: " << nccl.unavailable_reason);
    return;
  }
  // A world of one: the broadcast leaves the root's bytes as they are.
  auto alone = broadcast_on_gpu(0, 1, 0, 3 << 20);
  if (!alone) FAIL(alone.error().to_string());
  CHECK(*alone == pattern(3 << 20, 1));
  if (info.devices.size() < 2) {
    WARN("SKIPPED [gpu]: the two-rank NCCL broadcast needs two GPUs; this machine has one");
    return;
  }
  const std::uint16_t port = free_port();
  auto rank0 = std::async(std::launch::async, broadcast_on_gpu, 0u, 2u, port, std::size_t{5} << 20);
  auto rank1 = std::async(std::launch::async, broadcast_on_gpu, 1u, 2u, port, std::size_t{5} << 20);
  auto got0 = rank0.get(), got1 = rank1.get();
  if (!got0) FAIL(got0.error().to_string());
  if (!got1) FAIL(got1.error().to_string());
  CHECK(*got0 == pattern(5 << 20, 1));
  CHECK(*got1 == pattern(5 << 20, 1));  // rank 0's bytes arrived on cuda:1
}

TEST_CASE("communicator: two GPU replicas sharing reads each hold the whole checkpoint", "[gpu][nccl]") {
  const CudaInfo info = probe_cuda();
  if (info.devices.size() < 2) {
    WARN("SKIPPED [gpu]: shared reads onto GPUs need two GPUs; this machine has " << info.devices.size());
    return;
  }
  if (const NcclInfo nccl = probe_nccl(); nccl.library_version == 0) {
    WARN("SKIPPED [gpu]: no NCCL library here: " << nccl.unavailable_reason);
    return;
  }
  Llama m;
  make_model(m);
  auto catalog = scheduler::open_source(m.dir.path().string());
  REQUIRE(catalog);
  const std::uint16_t port = free_port();
  const auto rank = [&](std::uint32_t r) -> Result<std::vector<std::string>> {
    QLOAD_ASSIGN_OR_RETURN(
        distributed::Rendezvous rv,
        distributed::Rendezvous::join(
            distributed::World{.rank = r, .size = 2, .local_rank = r, .local_size = 2, .master_port = port}, 60s));
    const std::vector<int> slots = {static_cast<int>(r)};
    QLOAD_ASSIGN_OR_RETURN(distributed::Communicator comm, distributed::Communicator::create(rv, slots));
    scheduler::LoadOptions o;
    o.plan.parallel = {.data = 2, .processes = 2, .process = r, .share_reads = true};
    o.plan.devices = {Device{.kind = Device::Kind::kCuda, .index = static_cast<int>(r)}};
    QLOAD_ASSIGN_OR_RETURN(scheduler::Model model,
                           scheduler::load_source(m.dir.path().string(), o, {.communicator = &comm}));
    return copy_mismatches(m, model, fmt::format("cuda:{}", r), 0, 1, false);
  };
  expect_both_clean(rank);
}

TEST_CASE("shared reads: tensor-parallel shards relayed onto a GPU match the reference", "[gpu]") {
  const CudaInfo info = probe_cuda();
  if (info.devices.empty()) {
    WARN("SKIPPED [gpu]: no GPU visible: " << info.unavailable_reason);
    return;
  }
#ifndef QLOAD_TEST_HAVE_GLOO
  WARN("SKIPPED [gpu]: relaying host memory between processes needs Gloo, and this build has none (a static one)");
  return;
#endif
  // Two processes (threads here) of tp 2, both on cuda:0 (separate arenas): each reads half
  // the tensors and gets its shards of the others relayed through Gloo, converted to
  // f32 or not (a GPU-bound copy is cut and converted on the host first).
  Llama m;
  make_model(m);
  for (const bool convert : {false, true}) {
    INFO((convert ? "f32" : "bf16"));
    const std::uint16_t port = free_port();
    const auto rank = [&](std::uint32_t r) -> Result<std::vector<std::string>> {
      QLOAD_ASSIGN_OR_RETURN(
          distributed::Rendezvous rv,
          distributed::Rendezvous::join(
              distributed::World{.rank = r, .size = 2, .local_rank = r, .local_size = 2, .master_port = port}, 60s));
      const std::vector<int> host_slots = {-1};  // the relay moves host memory: no NCCL
      QLOAD_ASSIGN_OR_RETURN(distributed::Communicator comm, distributed::Communicator::create(rv, host_slots));
      scheduler::LoadOptions o;
      o.plan.parallel = {.tensor = 2, .processes = 2, .process = r, .share_reads = true};
      o.plan.devices = {Device{.kind = Device::Kind::kCuda, .index = 0}};
      if (convert) o.plan.dtype = DType::kF32;
      QLOAD_ASSIGN_OR_RETURN(scheduler::Model model,
                             scheduler::load_source(m.dir.path().string(), o, {.communicator = &comm}));
      QLOAD_ASSIGN_OR_RETURN(std::vector<std::string> mismatches, copy_mismatches(m, model, "cuda:0", r, 2, convert));
      if (model.report().shared_received_bytes == 0) mismatches.push_back("nothing was relayed");
      return mismatches;
    };
    expect_both_clean(rank);
  }
}

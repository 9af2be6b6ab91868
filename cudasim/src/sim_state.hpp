// The simulated driver's state. A real CUDA driver is one per process, and so is this: one
// State, created on the first call and never destroyed (engine threads may outlive main).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "qload/cudasim/control.hpp"

namespace qload::cudasim {

struct Config {
  int devices = 2;
  std::size_t memory_per_device = std::size_t{1} << 30;
  std::uint64_t seed = 1;
  unsigned max_delay_us = 50;
  bool abort_on_misuse = true;
};
Config config_from_environment();

// ---------------------------------------------------------------------------------------------
// Memory: every allocation in a mapping of its own, between inaccessible guard pages, its end
// against the trailing guard (256-byte aligned, as cudaMalloc's); the few bytes between the end
// and the guard hold a canary checked on free. Freed mappings become inaccessible and stay
// reserved for a while, so a use after free faults.

enum class MemoryKind { kDevice, kPinnedHost, kRegisteredHost };

struct Range {
  std::byte* data = nullptr;  // what the caller got
  std::size_t size = 0;
  MemoryKind kind = MemoryKind::kDevice;
  int device = -1;  // kDevice: its device
  // The mapping (kDevice, kPinnedHost); null for registered host memory (not ours).
  std::byte* mapping = nullptr;
  std::size_t mapping_size = 0;
  // Host ranges: per stream engine, the last queued copy from or to it (engine, ticket).
  // Freeing or unregistering the range waits for those, and only those: one process's threads
  // standing in for ranks must not wait for each other's streams (an NCCL collective on one
  // would wait for the other rank forever).
  std::vector<std::pair<std::weak_ptr<class Engine>, std::uint64_t>> copies;
};

class GuardedMemory {
 public:
  // A mapping of `size` bytes (at least one byte mapped), poisoned with 0xCD; null when the
  // system refuses.
  static Range map(std::size_t size, MemoryKind kind, int device);
  // Checks the canary (false: overrun), then makes the mapping inaccessible and quarantines it.
  bool unmap(const Range& range);

 private:
  std::mutex mutex_;
  std::deque<Range> quarantine_;
  std::size_t quarantined_bytes_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Streams: an engine thread per stream runs its operations in order, each after a random
// (seeded) delay, so work a missing synchronisation does not wait for has not happened yet.

struct Operation {
  std::string what;
  std::function<void()> run;
};

class Engine {
 public:
  Engine(int device, std::uint64_t seed, unsigned max_delay_us);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  int device() const noexcept { return device_; }
  // The ticket of the operation: it has run when completed() >= ticket.
  std::uint64_t enqueue(Operation op);
  void wait_for(std::uint64_t ticket);
  std::uint64_t completed() const;
  std::uint64_t enqueued() const;
  void drain() { wait_for(enqueued()); }

 private:
  void loop();

  int device_;
  std::mt19937_64 rng_;
  unsigned max_delay_us_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Operation> queue_;
  std::uint64_t enqueued_ = 0;
  std::uint64_t completed_ = 0;
  bool stopping_ = false;
  std::thread thread_;  // last
};

}  // namespace qload::cudasim

// The handles cudaStream_t and cudaEvent_t point at.
struct CUstream_st {
  std::shared_ptr<qload::cudasim::Engine> engine;
  bool legacy = false;
};
struct CUevent_st {
  int device = 0;
  std::shared_ptr<qload::cudasim::Engine> engine;  // of the last record; null before any
  std::uint64_t ticket = 0;
};

namespace qload::cudasim {

struct DeviceState {
  std::size_t used = 0;
  bool context = false;
  cudaError_t sticky = cudaSuccess;  // a failed copy or launch, or a lost device
  std::unique_ptr<CUstream_st> legacy;
};

struct FaultPlan {
  Fault fault;
  int device;
  int remaining;  // fires when it reaches 0
};

class State {
 public:
  static State& get();

  const Config config;
  GuardedMemory memory;

  std::mutex mutex;  // everything below
  std::vector<DeviceState> devices;
  std::map<std::uintptr_t, Range> ranges;  // by data address: device, pinned and registered
  std::vector<std::weak_ptr<Engine>> engines;
  std::vector<FaultPlan> faults;
  std::vector<std::string> misuse;
  unsigned max_delay_us;         // of streams made from now on (config, or set_max_delay_us)
  std::size_t pinned_bytes = 0;  // cudaHostAlloc'd and registered, now
  std::size_t peak_pinned_bytes = 0;
  void add_pinned(std::size_t bytes) {
    pinned_bytes += bytes;
    peak_pinned_bytes = std::max(peak_pinned_bytes, pinned_bytes);
  }

  // The range holding [p, p + size) (under `mutex`), or null.
  const Range* find(const void* p, std::size_t size) const;
  // Counts a call of `fault`'s kind on `device`: true if an injected fault fires now.
  bool fault_fires(Fault fault, int device);
  // A misuse: recorded, printed, and (by default) the process aborts.
  void report(const std::string& what);
  CUstream_st* legacy_stream(int device);  // under `mutex`
  // Waits until every stream of `device` (-1: of every device) has run what is queued; not
  // under `mutex`.
  void drain(int device);
  // Under `mutex`: notes that `engine` will reach `ticket` after a copy touching the host
  // range holding `p`, if `p` is in one.
  void note_host_copy(const void* p, const std::shared_ptr<Engine>& engine, std::uint64_t ticket);
  // Not under `mutex`: waits for every copy noted on the host range starting at `p`.
  void wait_for_host_copies(const void* p);
  std::shared_ptr<Engine> make_engine(int device);

 private:
  explicit State(Config c);
};

// The calling thread's current device (cudaSetDevice).
int& current_device();

}  // namespace qload::cudasim

// The simulated CUDA runtime (cudasim/) is only useful if it is strict: these cases check
// that it reports each misuse it promises to, runs streams asynchronously, and injects faults.
// Misuse is recorded rather than fatal here (QLOAD_CUDASIM_ON_ERROR=continue, set before the
// first CUDA call); everywhere else it aborts the process.
#include <cuda_runtime.h>
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "qload/cudasim/control.hpp"

namespace sim = qload::cudasim;

namespace {

const bool report_only = [] { return ::setenv("QLOAD_CUDASIM_ON_ERROR", "continue", 1) == 0; }();

bool reported(const char* text) {
  for (const std::string& r : sim::reports())
    if (r.find(text) != std::string::npos) return true;
  return false;
}

// Keeps `stream` busy for `ms` milliseconds: what is queued after it has not run yet.
void stall(cudaStream_t stream, int ms) {
  REQUIRE(sim::launch(dim3(1), dim3(1), stream, [ms] { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }) ==
          cudaSuccess);
}

struct Fresh {
  Fresh() {
    REQUIRE(report_only);
    sim::reset();
    REQUIRE(cudaSetDevice(0) == cudaSuccess);
  }
  ~Fresh() { sim::reset(); }
};

}  // namespace

TEST_CASE("cudasim: devices, properties and memory figures", "[cudasim]") {
  Fresh fresh;
  int count = 0;
  REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  CHECK(count == sim::device_count());
  REQUIRE(count >= 2);
  CHECK(cudaSetDevice(count) == cudaErrorInvalidDevice);
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
  CHECK(cudaGetLastError() == cudaSuccess);  // read once, then cleared
  std::size_t free_before = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free_before, &total) == cudaSuccess);
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, 3 << 20) == cudaSuccess);
  CHECK(reinterpret_cast<std::uintptr_t>(p) % 256 == 0);
  std::size_t free_during = 0;
  REQUIRE(cudaMemGetInfo(&free_during, &total) == cudaSuccess);
  CHECK(free_before - free_during == std::size_t{3} << 20);
  CHECK(sim::live_allocations(0) == 1);
  void* too_much = nullptr;
  CHECK(cudaMalloc(&too_much, free_during + 1) == cudaErrorMemoryAllocation);
  REQUIRE(cudaFree(p) == cudaSuccess);
  REQUIRE(cudaMemGetInfo(&free_during, &total) == cudaSuccess);
  CHECK(free_during == free_before);
  CHECK(sim::live_allocations(0) == 0);
}

TEST_CASE("cudasim: fresh device memory is poisoned, not zeroed", "[cudasim]") {
  Fresh fresh;
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, 1000) == cudaSuccess);
  std::vector<unsigned char> back(1000, 0);
  REQUIRE(cudaMemcpy(back.data(), p, back.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(std::all_of(back.begin(), back.end(), [](unsigned char b) { return b == 0xCD; }));
  REQUIRE(cudaFree(p) == cudaSuccess);
}

TEST_CASE("cudasim: streams are asynchronous: unsynchronised work has not happened yet", "[cudasim]") {
  Fresh fresh;
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  void* d = nullptr;
  REQUIRE(cudaMalloc(&d, 64) == cudaSuccess);
  auto* word = static_cast<unsigned*>(d);
  stall(stream, 50);
  REQUIRE(sim::launch(dim3(1), dim3(1), stream, [word] { *word = 42; }) == cudaSuccess);
  CHECK(cudaStreamQuery(stream) == cudaErrorNotReady);
  unsigned seen = 0;
  // The legacy stream does not wait for a non-blocking one: this copy races the kernel, and
  // loses, as on a real GPU.
  REQUIRE(cudaMemcpy(&seen, d, sizeof seen, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(seen != 42);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  REQUIRE(cudaMemcpy(&seen, d, sizeof seen, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(seen == 42);
  // An event orders work across streams.
  cudaStream_t other = nullptr;
  cudaEvent_t done = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaEventCreateWithFlags(&done, cudaEventDisableTiming) == cudaSuccess);
  stall(stream, 20);
  REQUIRE(sim::launch(dim3(1), dim3(1), stream, [word] { *word = 7; }) == cudaSuccess);
  REQUIRE(cudaEventRecord(done, stream) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(other, done) == cudaSuccess);
  REQUIRE(sim::launch(dim3(1), dim3(1), other, [word] { *word += 1; }) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(other) == cudaSuccess);
  REQUIRE(cudaMemcpy(&seen, d, sizeof seen, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(seen == 8);
  REQUIRE(cudaEventDestroy(done) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(other) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(stream) == cudaSuccess);
  REQUIRE(cudaFree(d) == cudaSuccess);
}

TEST_CASE("cudasim: kernels run once per thread of the grid, with their built-ins", "[cudasim]") {
  Fresh fresh;
  std::vector<int> hits(3 * 2 * 4 * 2, 0);
  REQUIRE(sim::launch(dim3(3, 2), dim3(4, 2), nullptr, [&hits] {
            const unsigned block = blockIdx.y * gridDim.x + blockIdx.x;
            const unsigned thread = threadIdx.y * blockDim.x + threadIdx.x;
            ++hits[block * blockDim.x * blockDim.y + thread];
          }) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
  CHECK(sim::launch(dim3(0), dim3(1), nullptr, [] {}) == cudaErrorInvalidConfiguration);
  CHECK(sim::launch(dim3(1), dim3(2048), nullptr, [] {}) == cudaErrorInvalidConfiguration);
  // A kernel runs on the current device: a stream of another device is refused.
  cudaStream_t on_one = nullptr;
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&on_one, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  CHECK(sim::launch(dim3(1), dim3(1), on_one, [] {}) == cudaErrorInvalidResourceHandle);
  REQUIRE(cudaStreamDestroy(on_one) == cudaSuccess);
}

TEST_CASE("cudasim: an async copy from pageable memory is reported", "[cudasim]") {
  Fresh fresh;
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  void* d = nullptr;
  REQUIRE(cudaMalloc(&d, 4096) == cudaSuccess);
  std::vector<char> pageable(4096, 'x');
  CHECK(cudaMemcpyAsync(d, pageable.data(), pageable.size(), cudaMemcpyHostToDevice, stream) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(reported("from pageable memory"));
  // Registered memory is fine.
  sim::reset();
  REQUIRE(cudaHostRegister(pageable.data(), pageable.size(), cudaHostRegisterPortable) == cudaSuccess);
  CHECK(cudaHostRegister(pageable.data() + 8, 8, 0) == cudaErrorHostMemoryAlreadyRegistered);
  CHECK(cudaMemcpyAsync(d, pageable.data(), pageable.size(), cudaMemcpyHostToDevice, stream) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(sim::reports().empty());
  REQUIRE(cudaHostUnregister(pageable.data()) == cudaSuccess);
  CHECK(cudaHostUnregister(pageable.data()) == cudaErrorHostMemoryNotRegistered);
  REQUIRE(cudaStreamDestroy(stream) == cudaSuccess);
  REQUIRE(cudaFree(d) == cudaSuccess);
}

TEST_CASE("cudasim: a pinned buffer reused before its async copy ran is reported", "[cudasim]") {
  Fresh fresh;
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  void* d = nullptr;
  void* h = nullptr;
  REQUIRE(cudaMalloc(&d, 4096) == cudaSuccess);
  REQUIRE(cudaHostAlloc(&h, 4096, cudaHostAllocPortable) == cudaSuccess);
  std::memset(h, 1, 4096);
  stall(stream, 30);
  REQUIRE(cudaMemcpyAsync(d, h, 4096, cudaMemcpyHostToDevice, stream) == cudaSuccess);
  std::memset(h, 2, 4096);  // the slot's next use, before the copy ran: the bug the check finds
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(reported("changed between the copy's issue and its execution"));
  CHECK(reported("pinned host buffer"));
  REQUIRE(cudaFreeHost(h) == cudaSuccess);
  REQUIRE(cudaFree(d) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(stream) == cudaSuccess);
}

TEST_CASE("cudasim: writes past an allocation, out-of-range copies and bad frees are reported", "[cudasim]") {
  Fresh fresh;
  void* d = nullptr;
  REQUIRE(cudaMalloc(&d, 100) == cudaSuccess);
  static_cast<unsigned char*>(d)[100] = 1;  // a kernel's off-by-one (the sim's memory is host memory)
  REQUIRE(cudaFree(d) == cudaSuccess);
  CHECK(reported("write past the end"));
  int local = 0;
  CHECK(cudaFree(&local) == cudaErrorInvalidValue);
  CHECK(reported("not a pointer cudaMalloc returned"));
  void* small = nullptr;
  REQUIRE(cudaMalloc(&small, 256) == cudaSuccess);
  std::vector<char> big(512);
  CHECK(cudaMemcpy(small, big.data(), big.size(), cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(reported("run past its end"));
  CHECK(cudaMemcpy(big.data(), big.data() + 1, 8, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
  CHECK(reported("is not device memory"));
  REQUIRE(cudaFree(small) == cudaSuccess);
}

TEST_CASE("cudasim: injected faults fail the nth call, and a lost device stays lost until reset", "[cudasim]") {
  Fresh fresh;
  void* a = nullptr;
  void* b = nullptr;
  sim::inject(sim::Fault::kMalloc, 2);
  REQUIRE(cudaMalloc(&a, 64) == cudaSuccess);
  CHECK(cudaMalloc(&b, 64) == cudaErrorMemoryAllocation);
  REQUIRE(cudaMalloc(&b, 64) == cudaSuccess);
  std::vector<char> host(64);
  REQUIRE(cudaHostRegister(host.data(), host.size(), 0) == cudaSuccess);
  REQUIRE(cudaHostUnregister(host.data()) == cudaSuccess);
  sim::inject(sim::Fault::kHostRegister, 1);
  CHECK(cudaHostRegister(host.data(), host.size(), 0) == cudaErrorInvalidValue);
  // A failed async copy surfaces at synchronisation, and sticks to the device.
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  sim::inject(sim::Fault::kCopy, 1);
  CHECK(cudaMemcpyAsync(a, b, 64, cudaMemcpyDeviceToDevice, stream) == cudaSuccess);
  CHECK(cudaStreamSynchronize(stream) == cudaErrorLaunchFailure);
  CHECK(cudaMemcpy(a, b, 64, cudaMemcpyDeviceToDevice) == cudaErrorLaunchFailure);
  sim::reset();
  CHECK(cudaMemcpy(a, b, 64, cudaMemcpyDeviceToDevice) == cudaSuccess);
  sim::inject(sim::Fault::kDeviceLost, 1, 0);
  CHECK(cudaMemcpy(a, b, 64, cudaMemcpyDeviceToDevice) == cudaErrorDevicesUnavailable);
  std::size_t free = 0, total = 0;
  CHECK(cudaMemGetInfo(&free, &total) == cudaErrorDevicesUnavailable);
  REQUIRE(cudaSetDevice(1) == cudaSuccess);  // the other device is fine
  CHECK(cudaMemGetInfo(&free, &total) == cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  sim::reset();
  REQUIRE(cudaStreamDestroy(stream) == cudaSuccess);
  REQUIRE(cudaFree(a) == cudaSuccess);
  REQUIRE(cudaFree(b) == cudaSuccess);
}

TEST_CASE("cudasim: contexts are made by work on a device, not by asking about it", "[cudasim]") {
  Fresh fresh;
  sim::forget_contexts();
  int device = -1;
  cudaDeviceProp prop{};
  int sms = 0;
  REQUIRE(cudaGetDevice(&device) == cudaSuccess);
  REQUIRE(cudaGetDeviceProperties(&prop, 1) == cudaSuccess);
  REQUIRE(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 1) == cudaSuccess);
  CHECK_FALSE(sim::context_created(0));
  CHECK_FALSE(sim::context_created(1));
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  CHECK(sim::context_created(1));
  CHECK_FALSE(sim::context_created(0));
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  CHECK(sim::context_created(0));
}

// Device memory, streams, events, registration and copies. The [cuda] case runs in every
// build and checks that without a GPU nothing crashes and every factory says why; the [gpu]
// cases move real bytes and watch cudaMemGetInfo when a GPU is visible.
//
// The exact free-memory comparisons assume nothing else allocates on the GPU while the tests
// run (the lent machines are ours alone). cudaFree of allocations this large (whole 2 MiB
// pages) returns the memory to the device at once, so no slack is allowed.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu_memory.hpp"
#include "qload/runtime/cuda.hpp"
#include "qload/runtime/cuda_memory.hpp"
#include "qload/runtime/host_buffer.hpp"

using namespace qload;
using namespace qload::testing;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// The visible devices, or an empty list after saying why the [gpu] case is skipped.
std::vector<CudaDevice> gpus_or_skip() {
  const CudaInfo info = probe_cuda();
  if (info.devices.empty()) WARN("SKIPPED [gpu]: no GPU visible: " << info.unavailable_reason);
  return info.devices;
}

void fill_random(HostBuffer& buffer, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (std::byte& b : buffer.span()) b = static_cast<std::byte>(rng());
}

template <typename T>
void check_unsupported(const Result<T>& result, const std::string& reason) {
  REQUIRE_FALSE(result);
  CHECK(result.error().code() == Errc::kUnsupported);
  CHECK(result.error().message() == reason);
}

void check_invalid(const Status& status) {
  REQUIRE_FALSE(status);
  CHECK(status.error().code() == Errc::kInvalidArgument);
}

// One device: host -> device through a registered buffer on a stream, device -> device, and
// back to the host; the bytes must survive. The odd size checks that nothing rounds.
void round_trip(int device) {
  const std::size_t size = 64 * kMiB + 4097;
  auto host = HostBuffer::allocate(size);
  REQUIRE(host);
  fill_random(*host, 0x9e3779b97f4a7c15 + static_cast<std::uint64_t>(device));
  auto pinned = cuda::HostRegistration::register_memory(host->span());
  REQUIRE(pinned);
  CHECK(pinned->registered());

  auto staged = cuda::DeviceBuffer::allocate(device, size);
  auto copy = cuda::DeviceBuffer::allocate(device, size);
  auto stream = cuda::Stream::create(device);
  auto done = cuda::Event::create(device);
  REQUIRE(staged);
  REQUIRE(copy);
  REQUIRE(stream);
  REQUIRE(done);
  CHECK(staged->device() == device);
  CHECK(staged->size() == size);
  CHECK(reinterpret_cast<std::uintptr_t>(staged->data()) % 256 == 0);

  REQUIRE(cuda::copy_to_device_async(staged->data(), host->data(), size, *stream));
  REQUIRE(done->record(*stream));
  REQUIRE(done->synchronize());
  REQUIRE(stream->synchronize());
  REQUIRE(cuda::copy_on_device(copy->data(), staged->data(), size, device));

  auto back = HostBuffer::allocate(size);
  REQUIRE(back);
  REQUIRE(cuda::copy_to_host(back->data(), copy->data(), size, device));
  CHECK(std::memcmp(back->data(), host->data(), size) == 0);
}

}  // namespace

TEST_CASE("without a GPU every CUDA memory factory says why instead of crashing", "[cuda]") {
  const CudaInfo info = probe_cuda();
  if (!info.devices.empty()) {
    SUCCEED("a GPU is visible: the [gpu] cases check the real behaviour");
    return;
  }
  const std::string& reason = info.unavailable_reason;
  REQUIRE_FALSE(reason.empty());
  check_unsupported(cuda::DeviceBuffer::allocate(0, kMiB), reason);
  check_unsupported(cuda::Stream::create(0), reason);
  check_unsupported(cuda::Event::create(0), reason);
  check_unsupported(cuda::memory_info(0), reason);
  auto host = HostBuffer::allocate(kMiB);
  REQUIRE(host);
  check_unsupported(cuda::HostRegistration::register_memory(host->span()), reason);
  std::byte word[8] = {};
  check_unsupported(cuda::copy_to_host(word, word, sizeof word, 0), reason);
  check_unsupported(cuda::copy_on_device(word, word, sizeof word, 0), reason);

  // Empty requests need no CUDA, and empty handles are caller mistakes, in every build.
  auto empty = cuda::DeviceBuffer::allocate(0, 0);
  REQUIRE(empty);
  CHECK(empty->data() == nullptr);
  CHECK(empty->size() == 0);
  auto nothing = cuda::HostRegistration::register_memory({});
  REQUIRE(nothing);
  CHECK_FALSE(nothing->registered());
  const cuda::Stream no_stream;
  const cuda::Event no_event;
  check_invalid(cuda::copy_to_device_async(word, word, sizeof word, no_stream));
  check_invalid(no_stream.synchronize());
  check_invalid(no_event.record(no_stream));
  check_invalid(no_event.synchronize());
}

TEST_CASE("bytes survive host to device to device to host on every GPU", "[gpu]") {
  for (const CudaDevice& d : gpus_or_skip()) {
    INFO("cuda:" << d.index << " " << d.name);
    round_trip(d.index);
  }
}

TEST_CASE("allocating more than the GPU has is kOutOfMemory and costs nothing", "[gpu]") {
  for (const CudaDevice& d : gpus_or_skip()) {
    INFO("cuda:" << d.index << " " << d.name);
    auto before = cuda::memory_info(d.index);
    REQUIRE(before);
    auto too_big = cuda::DeviceBuffer::allocate(d.index, before->total_bytes + 1024 * kMiB);
    REQUIRE_FALSE(too_big);
    INFO(too_big.error().to_string());
    CHECK(too_big.error().code() == Errc::kOutOfMemory);
    CHECK_THAT(too_big.error().message(),
               Catch::Contains("cuda:" + std::to_string(d.index) + ": cannot allocate") && Catch::Contains("free"));
    CHECK(free_bytes_moved(free_bytes(d.index), before->free_bytes) <= kDriverSlack);
    // The failure is not sticky: the next allocation works.
    CHECK(cuda::DeviceBuffer::allocate(d.index, 2 * kMiB));
  }
}

TEST_CASE("freed device memory returns to the GPU at once, on the buffer's own device", "[gpu]") {
  const std::vector<CudaDevice> gpus = gpus_or_skip();
  if (gpus.empty()) return;
  const int first = gpus.front().index;
  const int last = gpus.back().index;
  const std::size_t start = free_bytes(last);
  {
    auto a = cuda::DeviceBuffer::allocate(last, 256 * kMiB);
    auto b = cuda::DeviceBuffer::allocate(last, 512 * kMiB);
    REQUIRE(a);
    REQUIRE(b);
    CHECK(free_bytes(last) <= start - 768 * kMiB);
    *a = std::move(*b);  // frees a's 256 MiB now
    CHECK(b->data() == nullptr);
    CHECK(a->size() == 512 * kMiB);
    CHECK(free_bytes(last) >= start - 512 * kMiB - 2 * kMiB);
    // Make another device current, so the destructor has to switch back to free correctly.
    (void)free_bytes(first);
  }
  CHECK(free_bytes_moved(free_bytes(last), start) <= kDriverSlack);
}

TEST_CASE("an unknown device ordinal is a device error naming it", "[gpu]") {
  const std::vector<CudaDevice> gpus = gpus_or_skip();
  if (gpus.empty()) return;
  const int missing = gpus.back().index + 5;
  auto r = cuda::DeviceBuffer::allocate(missing, kMiB);
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::kDevice);
  CHECK_THAT(r.error().message(), Catch::Contains("cuda:" + std::to_string(missing)));
  CHECK(cuda::DeviceBuffer::allocate(gpus.front().index, kMiB));  // and nothing sticks
}

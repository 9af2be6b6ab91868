// GPU loads under injected faults, on the simulated CUDA runtime (QLOAD_CUDA_SIM builds; a
// real GPU cannot be made to fail on cue): host memory that cannot be pinned, a copy that
// fails, a device lost mid-load. Each ends in a complete model or an error naming the device,
// with every device byte given back.
#include <catch2/catch.hpp>

#if defined(QLOAD_CUDA_SIM)

#include <cstring>
#include <thread>

#include "qload/cudasim/control.hpp"
#include "qload/formats/convert_cuda.hpp"
#include "qload/runtime/cuda_memory.hpp"
#include "qload/scheduler/load.hpp"
#include "scheduler/scheduler_test_support.hpp"

using namespace qload;
using namespace qload::scheduler;
using namespace qload::testing;
namespace sim = qload::cudasim;

namespace {

LoadOptions options_for(std::vector<Device> devices) {
  LoadOptions options;
  options.plan.devices = std::move(devices);
  options.staging = {.slot_bytes = 1 << 20, .total_bytes = 8 << 20};
  options.plan.chunk_bytes = 1 << 20;
  return options;
}

const Device kGpu0{.kind = Device::Kind::kCuda, .index = 0};

struct CleanSimulator {
  CleanSimulator() { sim::reset(); }
  ~CleanSimulator() { sim::reset(); }
};

}  // namespace

TEST_CASE("gpu faults: host memory that cannot be pinned falls back to synchronous copies and says so", "[gpu]") {
  CleanSimulator clean;
  SyntheticCheckpoint ckpt;
  make_synthetic(ckpt, 43, {.large_bytes = 3 << 20});
  for (const bool convert : {false, true}) {
    DYNAMIC_SECTION((convert ? "converted to f32 on the GPU" : "as stored")) {
      LoadOptions options = options_for({kGpu0});
      if (convert) options.plan.dtype = DType::kF32;
      sim::inject(sim::Fault::kHostRegister, 1);  // the staging pool's registration
      auto model = load(ckpt.catalog, options);
      REQUIRE(model);
      CHECK_THAT(model->report().unpinned_reason, Catch::Contains("cudaHostRegister"));
      CHECK_THAT(model->report().summary(), Catch::Contains("ran synchronously"));
      auto pinned = load(ckpt.catalog, options);  // and the same load, pinned, gives the same bytes
      REQUIRE(pinned);
      CHECK(pinned->report().unpinned_reason.empty());
      for (const formats::TensorEntry& entry : ckpt.catalog.tensors) {
        const DeviceTensor* a = model->find(entry.name);
        const DeviceTensor* b = pinned->find(entry.name);
        REQUIRE((a != nullptr && b != nullptr && a->nbytes == b->nbytes));
        std::vector<std::byte> x(a->nbytes), y(b->nbytes);
        REQUIRE(model->copy_to_host(*a, 0, x));
        REQUIRE(pinned->copy_to_host(*b, 0, y));
        INFO(entry.name);
        CHECK(x == y);
      }
    }
  }
}

TEST_CASE("gpu faults: a failed copy or a lost device ends the load naming the device, freeing everything", "[gpu]") {
  CleanSimulator clean;
  SyntheticCheckpoint ckpt;
  make_synthetic(ckpt, 44, {.files_max = 2, .tensors_max = 12, .large_bytes = 2 << 20});
  const std::size_t pinned_before = sim::pinned_ranges();
  for (const sim::Fault fault : {sim::Fault::kCopy, sim::Fault::kDeviceLost, sim::Fault::kMalloc}) {
    DYNAMIC_SECTION("fault " << static_cast<int>(fault)) {
      sim::reset();
      sim::inject(fault, fault == sim::Fault::kMalloc ? 1 : 3, 0);
      auto model = load(ckpt.catalog, options_for({kGpu0}));
      REQUIRE_FALSE(model);
      CHECK((model.error().code() == Errc::kDevice || model.error().code() == Errc::kOutOfMemory));
      CHECK_THAT(model.error().to_string(), Catch::Contains("cuda:0"));
      CHECK(sim::live_allocations(0) == 0);
      CHECK(sim::pinned_ranges() == pinned_before);
      sim::reset();
      auto again = load(ckpt.catalog, options_for({kGpu0}));  // the device works again
      REQUIRE(again);
    }
  }
}

#endif  // QLOAD_CUDA_SIM

#if defined(QLOAD_CUDA_SIM)
TEST_CASE("gpu contexts: a load onto cuda:1 from a thread that never chose a device makes no context on GPU 0",
          "[gpu]") {
  CleanSimulator clean;
  SyntheticCheckpoint ckpt;
  make_synthetic(ckpt, 45, {.large_bytes = 1 << 20});
  LoadOptions options = options_for({Device{.kind = Device::Kind::kCuda, .index = 1}});
  options.plan.dtype = DType::kF32;  // conversion kernels too
  bool loaded = false, on_one = false, on_zero = true;
  std::thread fresh_thread([&] {  // Catch's assertions stay on the test's own thread
    sim::forget_contexts();
    loaded = load(ckpt.catalog, options).has_value();
    on_one = sim::context_created(1);
    on_zero = sim::context_created(0);
  });
  fresh_thread.join();
  REQUIRE(loaded);
  CHECK(on_one);
  // A GPU 0 context costs hundreds of MiB there, in every process of a multi-GPU server.
  CHECK_FALSE(on_zero);
}

TEST_CASE(
    "gpu contexts: a conversion launched on cuda:1 from a thread that never chose a device makes no context "
    "on GPU 0",
    "[gpu]") {
  CleanSimulator clean;
  bool converted = false, on_zero = true;
  std::thread fresh_thread([&] {
    auto stream = cuda::Stream::create(1);
    auto in = cuda::DeviceBuffer::allocate(1, 1024);
    auto out = cuda::DeviceBuffer::allocate(1, 2048);
    sim::forget_contexts();     // only what the launch itself does counts
    std::thread launcher([&] {  // never chose a device: cudaGetDevice says 0
      converted = stream && in && out &&
                  formats::convert_on_device(in->data(), DType::kBF16, out->data(), DType::kF32, 512, *stream) &&
                  stream->synchronize();
      on_zero = sim::context_created(0);
    });
    launcher.join();
  });
  fresh_thread.join();
  CHECK(converted);
  // The launch used to put the thread "back" on device 0, which made a context there.
  CHECK_FALSE(on_zero);
}
#endif

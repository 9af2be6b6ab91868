// The CUDA dequantization (quant_cuda.hpp) against the CPU decoders (quant_codec.hpp), which
// tests/formats/quant_*_test.cpp check against an independent bit-by-bit reference: for every
// case of quant_device_cases.hpp and every output dtype, the device must give the same bits as
// the host (a NaN only has to be a NaN: GPU arithmetic returns the canonical NaN,
// docs/formats.md). Two large weights exercise the kernels' grid-stride loops. The kernels'
// arithmetic and argument checks also run without a GPU: tests/formats/quant_device_args_test.cpp.
#include <catch2/catch.hpp>

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "formats/quant_device_cases.hpp"
#include "qload/formats/quant_codec.hpp"
#include "qload/formats/quant_cuda.hpp"
#include "qload/runtime/cuda.hpp"
#include "qload/runtime/cuda_memory.hpp"

using namespace qload;
using namespace qload::formats;
using namespace qload::testing::quant_ref;

namespace {

// The parts in device memory, each in its own allocation (so every pointer is 256-aligned).
struct DeviceWeight {
  std::vector<cuda::DeviceBuffer> buffers;
  std::vector<const std::byte*> pointers;
};

DeviceWeight upload(const Weight& w, const cuda::Stream& stream) {
  DeviceWeight d;
  for (const OwnedPart& p : w.parts) {
    auto buffer = cuda::DeviceBuffer::allocate(stream.device(), p.bytes.size());
    REQUIRE(buffer);
    if (!p.bytes.empty())
      REQUIRE(cuda::copy_to_device(buffer->data(), p.bytes.data(), p.bytes.size(), stream.device()));
    d.pointers.push_back(buffer->data());
    d.buffers.push_back(std::move(*buffer));
  }
  REQUIRE(stream.synchronize());
  return d;
}

// Rows [a, b) on the CPU and on the GPU (output poisoned first), compared element by element.
void check_rows(const Case& c, const DeviceWeight& d, std::uint64_t a, std::uint64_t b, DType out_dtype,
                const cuda::Stream& stream) {
  const Weight& w = c.weight;
  const std::vector<std::byte> host = cpu_rows(c, a, b, out_dtype);
  const std::uint64_t bytes = host.size();
  auto out = cuda::DeviceBuffer::allocate(stream.device(), std::max<std::uint64_t>(bytes, 1));
  REQUIRE(out);
  std::vector<std::byte> device(bytes, std::byte{0xA5});  // poison: unwritten elements show
  if (bytes != 0) REQUIRE(cuda::copy_to_device(out->data(), device.data(), bytes, stream.device()));
  const std::vector<PartBytes> views = w.views();
  const Status launched = dequantize_on_device(w.t, views, d.pointers, a, b, out_dtype, out->data(), stream);
  if (!launched) FAIL(launched.error().to_string());
  const Status done = stream.synchronize();
  if (!done) FAIL(done.error().to_string());
  if (bytes != 0) REQUIRE(cuda::copy_to_host(device.data(), out->data(), bytes, stream.device()));
  require_same_decode(c, a, b, out_dtype, host, device);
}

bool have_gpu(CudaInfo& info) {
  info = probe_cuda();
  if (info.devices.empty()) {
    WARN("SKIPPED [gpu]: no GPU visible: " << info.unavailable_reason);
    return false;
  }
  return true;
}

}  // namespace

TEST_CASE("device dequantization gives the CPU decoders' bits for every scheme and output dtype", "[gpu]") {
  CudaInfo info;
  if (!have_gpu(info)) return;
  auto stream = cuda::Stream::create(info.devices.front().index);
  REQUIRE(stream);
  Rng rng(7);
  for (const Case& c : device_cases(/*large=*/true)) {
    INFO(c.label);
    const DeviceWeight d = upload(c.weight, *stream);
    for (DType out : {DType::kF32, DType::kBF16, DType::kF16}) {
      check_rows(c, d, 0, c.weight.t.rows, out, *stream);
      const std::uint64_t a = rng() % c.weight.t.rows;
      check_rows(c, d, a, a + rng() % (c.weight.t.rows - a + 1), out, *stream);
    }
  }
}

TEST_CASE("device dequantization of stacked experts launches per expert and gives the CPU decoders' bits", "[gpu]") {
  CudaInfo info;
  if (!have_gpu(info)) return;
  auto stream = cuda::Stream::create(info.devices.front().index);
  REQUIRE(stream);
  for (const Case& c : stacked_cases()) {
    INFO(c.label);
    const DeviceWeight d = upload(c.weight, *stream);
    const std::uint64_t n = c.weight.t.rows / c.weight.t.experts;
    for (DType out : {DType::kF32, DType::kBF16}) {
      check_rows(c, d, 0, c.weight.t.rows, out, *stream);
      check_rows(c, d, n - 1, 2 * n + 1, out, *stream);  // across all three experts
    }
  }
}

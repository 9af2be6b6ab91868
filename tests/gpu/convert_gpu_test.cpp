// The CUDA conversions (convert_cuda.hpp) against the CPU ones (convert.hpp), which
// tests/formats/convert_test.cpp checks against independent references: every pair must give
// the same bits on the device as on the host. 16-bit sources are exhaustive; f32 sources are
// millions of random patterns plus every special class.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "qload/formats/convert.hpp"
#include "qload/formats/convert_cuda.hpp"
#include "qload/runtime/cuda.hpp"
#include "qload/runtime/cuda_memory.hpp"

using namespace qload;
using namespace qload::formats;

namespace {

std::vector<std::byte> all_16_bit_patterns() {
  std::vector<std::byte> out(65536 * 2);
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto v = static_cast<std::uint16_t>(i);
    std::memcpy(out.data() + 2 * i, &v, 2);
  }
  return out;
}

std::vector<std::byte> f32_patterns(std::size_t random_count) {
  std::vector<std::uint32_t> v = {0x00000000, 0x7f800000, 0x7fc00000, 0x7fffffff, 0x7f800001, 0x7fbfffff,
                                  0x7f802000, 0x00000001, 0x007fffff, 0x00800000, 0x7f7fffff, 0x3f808000,
                                  0x3f818000, 0x7f7f7fff, 0x7f7f8000, 0x007f8000, 0x00008000, 0x477fe000,
                                  0x477fefff, 0x477ff000, 0x33800000, 0x33000000, 0x33000001, 0x33c00000,
                                  0x387fc000, 0x387fe000, 0x38800000, 0x3f801000, 0x3f803000, 0x2f800000};
  const std::size_t specials = v.size();
  for (std::size_t i = 0; i < specials; ++i) v.push_back(v[i] | 0x80000000u);
  std::mt19937 rng(99);
  std::uniform_int_distribution<std::uint32_t> exponent(98, 144);  // where f16 has values
  for (std::size_t i = 0; i < random_count; ++i) {
    const auto x = static_cast<std::uint32_t>(rng());
    v.push_back(i % 2 == 0 ? x : (x & 0x807fffffu) | (exponent(rng) << 23));
  }
  std::vector<std::byte> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// Converts `in` on `device` and returns the bytes copied back.
std::vector<std::byte> convert_on_gpu(const std::vector<std::byte>& in, DType from, DType to, int device,
                                      const cuda::Stream& stream) {
  const std::uint64_t count = in.size() / dtype_info(from).block_bytes;
  std::vector<std::byte> out(converted_bytes(in.size(), from, to));
  auto d_in = cuda::DeviceBuffer::allocate(device, in.size());
  auto d_out = cuda::DeviceBuffer::allocate(device, out.size());
  REQUIRE(d_in);
  REQUIRE(d_out);
  REQUIRE(cuda::copy_to_device(d_in->data(), in.data(), in.size(), device));
  const Status launched = convert_on_device(d_in->data(), from, d_out->data(), to, count, stream);
  if (!launched) FAIL(launched.error().to_string());
  const Status done = stream.synchronize();
  if (!done) FAIL(done.error().to_string());
  REQUIRE(cuda::copy_to_host(out.data(), d_out->data(), out.size(), device));
  return out;
}

}  // namespace

TEST_CASE("device conversions give the same bits as convert() for every pair", "[gpu]") {
  const CudaInfo info = probe_cuda();
  if (info.devices.empty()) {
    WARN("SKIPPED [gpu]: no GPU visible: " << info.unavailable_reason);
    return;
  }
  const std::vector<std::byte> sixteen = all_16_bit_patterns();
  const std::vector<std::byte> thirty_two = f32_patterns(std::size_t{6} << 20);
  const DType floats[] = {DType::kF16, DType::kBF16, DType::kF32};
  for (const CudaDevice& d : info.devices) {
    auto stream = cuda::Stream::create(d.index);
    REQUIRE(stream);
    for (DType from : floats) {
      for (DType to : floats) {
        INFO("cuda:" << d.index << " " << d.name << ": " << dtype_name(from) << " -> " << dtype_name(to));
        const std::vector<std::byte>& in = from == DType::kF32 ? thirty_two : sixteen;
        std::vector<std::byte> want(converted_bytes(in.size(), from, to));
        REQUIRE(convert(in, from, want, to));
        const std::vector<std::byte> got = convert_on_gpu(in, from, to, d.index, *stream);
        const std::size_t out_size = dtype_info(to).block_bytes;
        std::size_t wrong = 0;
        std::size_t first_wrong = 0;
        for (std::size_t i = 0; i < want.size() / out_size; ++i) {
          if (std::memcmp(got.data() + i * out_size, want.data() + i * out_size, out_size) == 0) continue;
          if (wrong++ == 0) first_wrong = i;
        }
        INFO(wrong << " elements differ, the first at index " << first_wrong);
        REQUIRE(wrong == 0);
      }
    }
  }
}

TEST_CASE("device conversions reject bad requests before launching", "[gpu]") {
  const CudaInfo info = probe_cuda();
  if (info.devices.empty()) {
    WARN("SKIPPED [gpu]: no GPU visible: " << info.unavailable_reason);
    return;
  }
  auto stream = cuda::Stream::create(0);
  REQUIRE(stream);
  auto buffer = cuda::DeviceBuffer::allocate(0, 1 << 16);
  REQUIRE(buffer);
  std::byte* base = buffer->data();
  const auto expect_invalid = [](const Status& status) {
    REQUIRE_FALSE(status);
    CHECK(status.error().code() == Errc::kInvalidArgument);
  };
  expect_invalid(convert_on_device(base, DType::kF8_E4M3, base + 4096, DType::kF32, 16, *stream));
  expect_invalid(convert_on_device(base + 2, DType::kF32, base + 4096, DType::kBF16, 16, *stream));  // misaligned
  expect_invalid(convert_on_device(base, DType::kF32, base + 32, DType::kBF16, 16, *stream));        // overlap
  expect_invalid(convert_on_device(base, DType::kF32, base + 4096, DType::kBF16, 16, cuda::Stream{}));
  CHECK(convert_on_device(base, DType::kF32, base + 4096, DType::kBF16, 0, *stream));  // nothing to do
  CHECK(stream->synchronize());
}

TEST_CASE("device conversions explain why they cannot run without CUDA", "[cuda]") {
  const CudaInfo info = probe_cuda();
  std::byte* none = nullptr;
  const Status status = convert_on_device(none, DType::kF32, none, DType::kBF16, 16, cuda::Stream{});
  REQUIRE_FALSE(status);
  if (!info.compiled) {
    CHECK(status.error().code() == Errc::kUnsupported);
    CHECK(status.error().message() == "this qload was built without CUDA");
  } else {
    // Compiled in: the request itself is refused (no stream, null pointers), never launched.
    CHECK(status.error().code() == Errc::kInvalidArgument);
  }
#ifdef QLOAD_TEST_EXPECT_CUDA
  CHECK(info.compiled);
#endif
}

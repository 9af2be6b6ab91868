// The CUDA dequantization (quant_cuda.hpp) against the CPU decoders (quant_codec.hpp), which
// tests/formats/quant_*_test.cpp check against an independent bit-by-bit reference: for every
// scheme, width, group size, zero-point kind, g_idx, scale dtype and layout, and every output
// dtype, the device must give the same bits as the host (a NaN only has to be a NaN: GPU
// arithmetic returns the canonical NaN, docs/formats.md). Random parts from fixed seeds; K and
// N are not multiples of 128, and one large weight exercises the kernels' grid-stride loops.
#include <catch2/catch.hpp>

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "formats/quant_int_reference.hpp"
#include "qload/formats/quant_codec.hpp"
#include "qload/formats/quant_cuda.hpp"
#include "qload/runtime/cuda.hpp"
#include "qload/runtime/cuda_memory.hpp"

using namespace qload;
using namespace qload::formats;
using namespace qload::testing::quant_ref;

namespace {

struct Case {
  std::string label;
  Weight weight;
};

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
    if (!p.bytes.empty()) REQUIRE(cuda::copy_to_device_async(buffer->data(), p.bytes.data(), p.bytes.size(), stream));
    d.pointers.push_back(buffer->data());
    d.buffers.push_back(std::move(*buffer));
  }
  REQUIRE(stream.synchronize());
  return d;
}

bool is_nan(DType dtype, const std::byte* p) {
  if (dtype == DType::kF32) {
    std::uint32_t x;
    std::memcpy(&x, p, 4);
    return (x & 0x7fffffffu) > 0x7f800000u;
  }
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return dtype == DType::kBF16 ? (h & 0x7fffu) > 0x7f80u : (h & 0x7fffu) > 0x7c00u;
}

// Rows [a, b) on the CPU and on the GPU (output poisoned first), compared element by element.
void check_rows(const Case& c, const DeviceWeight& d, std::uint64_t a, std::uint64_t b, DType out_dtype,
                const cuda::Stream& stream) {
  const Weight& w = c.weight;
  const std::uint64_t elem = dtype_info(out_dtype).block_bytes;
  const std::uint64_t bytes = (b - a) * w.t.cols * elem;
  const std::vector<PartBytes> views = w.views();
  std::vector<std::byte> host(bytes);
  const Status cpu = dequantize_rows(w.t, views, a, b, out_dtype, host);
  if (!cpu) FAIL(cpu.error().to_string());

  auto out = cuda::DeviceBuffer::allocate(stream.device(), std::max<std::uint64_t>(bytes, 1));
  REQUIRE(out);
  std::vector<std::byte> device(bytes, std::byte{0xA5});  // poison: unwritten elements show
  if (bytes != 0) REQUIRE(cuda::copy_to_device_async(out->data(), device.data(), bytes, stream));
  const Status launched = dequantize_on_device(w.t, views, d.pointers, a, b, out_dtype, out->data(), stream);
  if (!launched) FAIL(launched.error().to_string());
  const Status done = stream.synchronize();
  if (!done) FAIL(done.error().to_string());
  if (bytes != 0) REQUIRE(cuda::copy_to_host(device.data(), out->data(), bytes, stream.device()));

  for (std::uint64_t i = 0; i < bytes; i += elem) {
    const bool same = std::memcmp(host.data() + i, device.data() + i, elem) == 0 ||
                      (is_nan(out_dtype, host.data() + i) && is_nan(out_dtype, device.data() + i));
    if (!same) {
      const std::uint64_t e = i / elem;
      FAIL(fmt::format("{} to {}, rows [{}, {}): first difference at row {}, column {}", c.label, dtype_name(out_dtype),
                       a, b, a + e / w.t.cols, e % w.t.cols));
    }
  }
}

void add_integer_cases(std::vector<Case>& cases, Rng& rng) {
  for (unsigned bits : {2u, 3u, 4u, 8u})
    for (std::uint64_t group : {32u, 128u, 0u})
      for (unsigned version : {1u, 2u})
        for (bool sym : {true, false})
          for (bool act_order : {false, true}) {
            const GptqCase g{bits, group, version, sym, act_order, bits == 3 ? DType::kBF16 : DType::kF16};
            cases.push_back({fmt::format("gptq {}-bit group {} v{} {} {}", bits, group, version, sym ? "sym" : "asym",
                                         act_order ? "act-order" : ""),
                             make_gptq(g, 352, 37, rng)});
          }
  for (std::uint64_t group : {32u, 64u, 128u}) {
    cases.push_back({fmt::format("awq gemm group {}", group), make_awq_gemm(384, 44, group, rng)});
    cases.push_back({fmt::format("awq gemv group {}", group), make_awq_gemv(384, 24, group, rng)});
  }
  for (unsigned bits : {2u, 3u, 4u, 8u})
    for (bool dense : {true, false})
      for (bool sym : {true, false})
        for (ScaleLayout layout : {ScaleLayout::kGroup, ScaleLayout::kRow}) {
          if (!dense && bits != 3) continue;  // padded differs from dense only for widths not dividing 32
          const CtCase c{.bits = bits, .dense = dense, .sym = sym, .g_idx = sym && layout == ScaleLayout::kGroup,
                         .layout = layout, .group = 32};
          cases.push_back({fmt::format("ct packed {}-bit {} {} layout {}", bits, dense ? "dense" : "padded",
                                       sym ? "sym g_idx" : "asym", static_cast<int>(layout)),
                           make_ct_packed(c, 90, 13, rng)});
        }
}

Weight ct_int_weight(ScaleLayout layout, DType zero_dtype, Rng& rng) {
  const std::uint64_t n = 13, k = 90, group = 32;
  Weight w;
  w.t.name = std::string(kName);
  w.t.rows = n;
  w.t.cols = k;
  w.t.params = {.scheme = QuantScheme::kCtInt,
                .bits = 8,
                .group_size = group,
                .sym = zero_dtype == DType::kBool,
                .scale_layout = layout,
                .weight_dtype = DType::kI8,
                .scale_dtype = DType::kF16};
  const std::uint64_t groups = layout == ScaleLayout::kGroup ? ref_ceil(k, group) : 1;
  const std::uint64_t params = layout == ScaleLayout::kTensor ? 1 : n * groups;
  const Shape pshape = layout == ScaleLayout::kTensor ? Shape{1} : layout == ScaleLayout::kRow ? Shape{n, 1} : Shape{n, groups};
  w.add("weight", DType::kI8, Shape{n, k}, random_bytes(n * k, rng));
  w.add("weight_scale", DType::kF16, pshape, random_scales(params, DType::kF16, rng));
  if (zero_dtype == DType::kI8) w.add("weight_zero_point", DType::kI8, pshape, random_bytes(params, rng));
  if (zero_dtype == DType::kI32) {
    std::vector<std::int32_t> z(params);
    for (std::int32_t& v : z) v = static_cast<std::int32_t>(rng() % 256) - 128;
    w.add("weight_zero_point", DType::kI32, pshape, i32_bytes(z));
  }
  return w;
}

// Every code of the FP8 dtype appears (NaN, subnormals, max), with scales over a wide range.
Weight fp8_weight(DType code, ScaleLayout layout, DType scale_dtype, std::uint64_t n, std::uint64_t k, Rng& rng) {
  Weight w;
  w.t.name = std::string(kName);
  w.t.rows = n;
  w.t.cols = k;
  w.t.params = {.scheme = QuantScheme::kFp8,
                .bits = 8,
                .group_size = layout == ScaleLayout::kGroup ? 64u : 0u,
                .scale_layout = layout,
                .block_rows = layout == ScaleLayout::kBlock ? 128u : 0u,
                .block_cols = layout == ScaleLayout::kBlock ? 128u : 0u,
                .weight_dtype = code,
                .scale_dtype = scale_dtype};
  Bytes codes = random_bytes(n * k, rng);
  for (std::uint64_t i = 0; i < 256 && i < codes.size(); ++i) codes[i] = static_cast<std::byte>(i);
  w.add("weight", code, Shape{n, k}, std::move(codes));
  Shape scale_shape;
  switch (layout) {
    case ScaleLayout::kTensor: scale_shape = Shape{1}; break;
    case ScaleLayout::kRow: scale_shape = Shape{n, 1}; break;
    case ScaleLayout::kGroup: scale_shape = Shape{n, ref_ceil(k, 64)}; break;
    case ScaleLayout::kBlock: scale_shape = Shape{ref_ceil(n, 128), ref_ceil(k, 128)}; break;
  }
  const std::uint64_t count = scale_shape.numel().value();
  w.add(layout == ScaleLayout::kBlock ? "weight_scale_inv" : "weight_scale", scale_dtype, scale_shape,
        random_scales(count, scale_dtype, rng));
  return w;
}

void add_float_cases(std::vector<Case>& cases, Rng& rng) {
  for (ScaleLayout layout : {ScaleLayout::kGroup, ScaleLayout::kRow, ScaleLayout::kTensor})
    for (DType z : {DType::kBool, DType::kI8, DType::kI32})
      cases.push_back({fmt::format("ct int layout {} zero {}", static_cast<int>(layout), dtype_name(z)),
                       ct_int_weight(layout, z, rng)});
  for (DType code : {DType::kF8_E4M3, DType::kF8_E5M2})
    for (DType scale : {DType::kF32, DType::kBF16, DType::kF16})
      for (ScaleLayout layout : {ScaleLayout::kTensor, ScaleLayout::kRow, ScaleLayout::kGroup, ScaleLayout::kBlock})
        cases.push_back({fmt::format("fp8 {} scale {} layout {}", dtype_name(code), dtype_name(scale),
                                     static_cast<int>(layout)),
                         fp8_weight(code, layout, scale, 200, 300, rng)});
}

std::vector<Case> all_cases() {
  Rng rng(0x6770755f64657121);
  std::vector<Case> cases;
  add_integer_cases(cases, rng);
  add_float_cases(cases, rng);
  // Large enough that the grid strides: 4128 x 2600 elements.
  cases.push_back({"gptq 4-bit large act-order", make_gptq({4, 128, 2, false, true, DType::kF16}, 4128, 2600, rng)});
  cases.push_back({"fp8 block large", fp8_weight(DType::kF8_E4M3, ScaleLayout::kBlock, DType::kF32, 2600, 4128, rng)});
  return cases;
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
  for (const Case& c : all_cases()) {
    INFO(c.label);
    const DeviceWeight d = upload(c.weight, *stream);
    for (DType out : {DType::kF32, DType::kBF16, DType::kF16}) {
      check_rows(c, d, 0, c.weight.t.rows, out, *stream);
      const std::uint64_t a = rng() % c.weight.t.rows;
      check_rows(c, d, a, a + rng() % (c.weight.t.rows - a + 1), out, *stream);
    }
  }
}

TEST_CASE("device dequantization refuses bad parts before launching, naming the tensor", "[gpu]") {
  CudaInfo info;
  if (!have_gpu(info)) return;
  auto stream = cuda::Stream::create(info.devices.front().index);
  REQUIRE(stream);
  Rng rng(8);
  Weight w = make_gptq({4, 32, 2, false, true, DType::kF16}, 128, 16, rng);
  DeviceWeight d = upload(w, *stream);
  auto out = cuda::DeviceBuffer::allocate(stream->device(), 128 * 16 * 4);
  REQUIRE(out);

  SECTION("g_idx out of range is kCorrupt naming the part and entry") {
    std::int32_t bad = 4;  // 128 / 32 = 4 groups: 4 is one past the last
    std::memcpy(w.part("g_idx").bytes.data() + 5 * 4, &bad, 4);
    const Status st = dequantize_on_device(w.t, w.views(), d.pointers, 0, 16, DType::kF32, out->data(), *stream);
    REQUIRE_FALSE(st);
    require_corrupt_naming(st.error(), "g_idx");
    CHECK(st.error().message().find("entry 5") != std::string::npos);
  }
  SECTION("a misaligned part pointer is kInvalidArgument") {
    d.pointers[0] += 2;
    const Status st = dequantize_on_device(w.t, w.views(), d.pointers, 0, 16, DType::kF32, out->data(), *stream);
    REQUIRE_FALSE(st);
    CHECK(st.error().code() == Errc::kInvalidArgument);
    CHECK(st.error().message().find("qweight") != std::string::npos);
  }
  SECTION("a missing part is kCorrupt naming it") {
    w.drop("scales");
    d.pointers.erase(d.pointers.begin() + 2);
    const Status st = dequantize_on_device(w.t, w.views(), d.pointers, 0, 16, DType::kF32, out->data(), *stream);
    REQUIRE_FALSE(st);
    require_corrupt_naming(st.error(), "scales");
  }
  SECTION("rows outside the weight are kInvalidArgument") {
    const Status st = dequantize_on_device(w.t, w.views(), d.pointers, 3, 17, DType::kF32, out->data(), *stream);
    REQUIRE_FALSE(st);
    CHECK(st.error().code() == Errc::kInvalidArgument);
  }
}

// The GPU dequantization without a GPU: the arguments the kernels get (quant/device_args.cpp)
// and the per-element arithmetic they run (quant/dequantize_element.hpp, compiled here for the
// host), against the CPU decoders, which quant_int_test / quant_ct_repack_test / quant_fp8_test
// check against independent references. Every case of quant_device_cases.hpp, every output
// dtype, whole weights and row ranges; "device" pointers are the host parts themselves. What
// this cannot check, the kernels' launch and memory traffic, tests/gpu/dequantize_gpu_test.cpp
// checks on a GPU.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "qload/formats/quant_codec.hpp"
#include "quant/dequantize_element.hpp"
#include "quant/device_args.hpp"
#include "quant_device_cases.hpp"

using namespace qload;
using namespace qload::formats;
using namespace qload::testing::quant_ref;

namespace {

std::vector<const std::byte*> host_pointers(const Weight& w) {
  std::vector<const std::byte*> out;
  for (const OwnedPart& p : w.parts) out.push_back(p.bytes.data());
  return out;
}

// Rows [a, b) through describe_dequantize + the element functions, compared with dequantize_rows.
void check_rows(const Case& c, std::uint64_t a, std::uint64_t b, DType out_dtype) {
  const Weight& w = c.weight;
  const std::vector<std::byte> want = cpu_rows(c, a, b, out_dtype);
  std::vector<std::byte> got(std::max<std::size_t>(want.size(), 4), std::byte{0xA5});  // poisoned
  const std::vector<PartBytes> views = w.views();
  const Result<detail::DequantArgs> args =
      detail::describe_dequantize(w.t, views, host_pointers(w), a, b, out_dtype, got.data());
  if (!args) FAIL(args.error().to_string());
  for (std::uint64_t n = a; n < b; ++n)
    for (std::uint64_t k = 0; k < w.t.cols; ++k)
      detail::element::store_element(*args, (n - a) * w.t.cols + k, detail::element::dequantize_element(*args, n, k));
  got.resize(want.size());
  require_same_decode(c, a, b, out_dtype, want, got);
}

Status describe(const Weight& w, std::vector<const std::byte*> pointers, std::uint64_t a, std::uint64_t b,
                std::vector<std::byte>& out) {
  const std::vector<PartBytes> views = w.views();
  Result<detail::DequantArgs> args = detail::describe_dequantize(w.t, views, pointers, a, b, DType::kF32, out.data());
  if (!args) return fail(args.error());
  return {};
}

}  // namespace

TEST_CASE("the GPU kernels' arithmetic, run on the host, gives the CPU decoders' bits", "[quant]") {
  Rng rng(11);
  for (const Case& c : device_cases(/*large=*/false)) {
    INFO(c.label);
    for (DType out : {DType::kF32, DType::kBF16, DType::kF16}) {
      check_rows(c, 0, c.weight.t.rows, out);
      const std::uint64_t a = rng() % c.weight.t.rows;
      check_rows(c, a, a + rng() % (c.weight.t.rows - a + 1), out);
    }
  }
}

TEST_CASE("device dequantization refuses bad parts before launching, naming the tensor", "[quant]") {
  Rng rng(8);
  Weight w = make_gptq({4, 32, 2, false, true, DType::kF16}, 128, 16, rng);
  std::vector<std::byte> out(128 * 16 * 4);

  SECTION("g_idx out of range is kCorrupt naming the part and entry") {
    const std::int32_t bad = 4;  // 128 / 32 = 4 groups: 4 is one past the last
    std::memcpy(w.part("g_idx").bytes.data() + 5 * 4, &bad, 4);
    const Status st = describe(w, host_pointers(w), 0, 16, out);
    REQUIRE_FALSE(st);
    require_corrupt_naming(st.error(), "g_idx");
    CHECK(st.error().message().find("entry 5") != std::string::npos);
  }
  SECTION("a misaligned part pointer is kInvalidArgument naming the part") {
    std::vector<const std::byte*> pointers = host_pointers(w);
    pointers[0] += 2;
    const Status st = describe(w, pointers, 0, 16, out);
    REQUIRE_FALSE(st);
    CHECK(st.error().code() == Errc::kInvalidArgument);
    CHECK(st.error().message().find("qweight") != std::string::npos);
  }
  SECTION("a missing part is kCorrupt naming it") {
    w.drop("scales");
    const Status st = describe(w, host_pointers(w), 0, 16, out);
    REQUIRE_FALSE(st);
    require_corrupt_naming(st.error(), "scales");
  }
  SECTION("rows outside the weight are kInvalidArgument") {
    const Status st = describe(w, host_pointers(w), 3, 17, out);
    REQUIRE_FALSE(st);
    CHECK(st.error().code() == Errc::kInvalidArgument);
  }
  SECTION("compressed-tensors int32 zero points out of range are kCorrupt naming the entry") {
    Weight ct = ct_int_weight(ScaleLayout::kRow, DType::kI32, rng);
    const std::int32_t bad = 1 << 24;
    std::memcpy(ct.part("weight_zero_point").bytes.data() + 3 * 4, &bad, 4);
    std::vector<std::byte> ct_out(ct.t.rows * ct.t.cols * 4);
    const Status st = describe(ct, host_pointers(ct), 0, ct.t.rows, ct_out);
    REQUIRE_FALSE(st);
    require_corrupt_naming(st.error(), "weight_zero_point");
  }
}

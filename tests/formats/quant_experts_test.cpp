// Stacked MoE experts [E, N, K] (LogicalTensor::experts): every part carries E as its leading
// dim. Detection checks each expert's slice as the 2-D weight it is; decoding (CPU, and the
// kernels' arithmetic on the host through expert_view) must equal each expert decoded alone.
// The 2-D decoders themselves are checked against the writing libraries elsewhere.
#include <catch2/catch.hpp>

#include "quant/decoders.hpp"
#include "quant/dequantize_element.hpp"
#include "quant/device_args.hpp"
#include "quant_detect_support.hpp"
#include "quant_device_cases.hpp"

using namespace qload;
using namespace qload::formats;
using namespace qload::testing::quant_ref;
namespace qd = qload::testing::quant_detect;

namespace {

// Each expert's rows decoded alone, one after the other.
std::vector<std::byte> experts_one_by_one(const std::vector<const Weight*>& experts, DType out_dtype) {
  std::vector<std::byte> out;
  for (const Weight* w : experts) {
    const std::vector<std::byte> rows = cpu_rows(Case{"expert", *w}, 0, w->t.rows, out_dtype);
    out.insert(out.end(), rows.begin(), rows.end());
  }
  return out;
}

// Rows [a, b) of a stacked weight through expert_view and describe_dequantize, one expert at a
// time as dequantize_on_device launches them, run by the kernels' element functions.
std::vector<std::byte> kernel_rows(const Weight& w, std::uint64_t a, std::uint64_t b, DType out_dtype) {
  const std::uint64_t n = w.t.rows / w.t.experts, elem = dtype_info(out_dtype).block_bytes;
  std::vector<std::byte> out((b - a) * w.t.cols * elem + 4, std::byte{0xA5});
  const std::vector<PartBytes> views = w.views();
  for (std::uint64_t e = a / n; e < w.t.experts && e * n < b; ++e) {
    const std::uint64_t lo = std::max(a, e * n), hi = std::min(b, (e + 1) * n);
    const Result<ExpertView> view = expert_view(w.t, views, e);
    REQUIRE(view);
    std::vector<const std::byte*> pointers;
    for (const PartBytes& p : view->parts) pointers.push_back(p.bytes.data());
    std::byte* dst = out.data() + (lo - a) * w.t.cols * elem;
    const Result<detail::DequantArgs> args =
        detail::describe_dequantize(view->tensor, view->parts, pointers, lo - e * n, hi - e * n, out_dtype, dst);
    if (!args) FAIL(args.error().to_string());
    for (std::uint64_t r = lo - e * n; r < hi - e * n; ++r)
      for (std::uint64_t k = 0; k < w.t.cols; ++k)
        detail::element::store_element(*args, (r - (lo - e * n)) * w.t.cols + k,
                                       detail::element::dequantize_element(*args, r, k));
  }
  out.resize(out.size() - 4);
  return out;
}

}  // namespace

TEST_CASE("stacked experts decode as each expert alone, for every scheme, on the CPU and in the kernels' arithmetic",
          "[quant][experts]") {
  const std::vector<Case> a = device_cases(false, 1), b = device_cases(false, 2), c = device_cases(false, 3);
  REQUIRE(a.size() == c.size());
  std::size_t stacked = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].weight.t.params.scheme == QuantScheme::kBnb4) continue;
    const std::vector<const Weight*> experts = {&a[i].weight, &b[i].weight, &c[i].weight};
    const Case s{a[i].label + " x3 experts", stack_experts(experts)};
    INFO(s.label);
    REQUIRE(s.weight.t.dequantized_shape() == Shape{3, a[i].weight.t.rows, a[i].weight.t.cols});
    ++stacked;
    for (DType out : {DType::kF32, DType::kBF16}) {
      const std::vector<std::byte> want = experts_one_by_one(experts, out);
      require_same_decode(s, 0, s.weight.t.rows, out, want, cpu_rows(s, 0, s.weight.t.rows, out));
      // A range from the last row of expert 0 into expert 2, and one inside expert 1.
      const std::uint64_t n = a[i].weight.t.rows, row = n * a[i].weight.t.cols * dtype_info(out).block_bytes;
      const auto part = [&](std::uint64_t lo, std::uint64_t hi) {
        return std::vector<std::byte>(want.begin() + static_cast<std::ptrdiff_t>(lo * row / n),
                                      want.begin() + static_cast<std::ptrdiff_t>(hi * row / n));
      };
      require_same_decode(s, n - 1, 2 * n + 1, out, part(n - 1, 2 * n + 1), cpu_rows(s, n - 1, 2 * n + 1, out));
      if (detail::stacked_rows_are_flat(s.weight.t)) continue;  // one launch over all rows, checked in the device test
      require_same_decode(s, 0, 3 * n, out, want, kernel_rows(s.weight, 0, 3 * n, out));
      require_same_decode(s, n + n / 2, 2 * n, out, part(n + n / 2, 2 * n),
                          kernel_rows(s.weight, n + n / 2, 2 * n, out));
    }
  }
  CHECK(stacked > 40);
}

TEST_CASE("a stacked expert's bad part is refused before decoding, naming the part", "[quant][experts]") {
  const std::vector<Case> a = device_cases(false, 1), b = device_cases(false, 2);
  const auto gptq = std::ranges::find_if(a, [](const Case& c) { return c.label.starts_with("gptq 4-bit group 32"); });
  REQUIRE(gptq != a.end());
  const std::size_t i = static_cast<std::size_t>(gptq - a.begin());
  Weight w = stack_experts({&a[i].weight, &b[i].weight});
  std::vector<std::byte> out(w.t.rows * w.t.cols * 4);
  // scales whose leading dim is not the expert count
  w.part("scales").shape = Shape{1, 2 * w.part("scales").shape[1], w.part("scales").shape[2]};
  const Status bad = dequantize_rows(w.t, w.views(), 0, w.t.rows, DType::kF32, out);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code() == Errc::kCorrupt);
  CHECK_THAT(bad.error().message(), Catch::Contains("part 'scales' of a weight of 2 stacked experts"));
  CHECK(bad.error().tensor() == std::optional<std::string_view>(kName));
  CHECK_FALSE(check_quantized_parts(w.t, w.views()));
}

TEST_CASE("detection: a 3-D anchor makes a weight of stacked experts, every part checked per expert",
          "[quant][experts][detect]") {
  using qd::T;
  const std::string p = "model.layers.0.mlp.experts.gate_up_proj";
  // FP8 with 128x128 blocks (DeepSeek-V3 naming) over 4 experts of [256, 320].
  std::vector<T> fp8 = {{p + ".weight", DType::kF8_E4M3, Shape{4, 256, 320}},
                        {p + ".weight_scale_inv", DType::kF32, Shape{4, 2, 3}},
                        {"model.norm.weight", DType::kBF16, Shape{320}}};
  const std::string fp8_config = R"({"quant_method":"fp8","weight_block_size":[128,128]})";
  auto q = detect_quantization(qd::make_catalog(fp8, fp8_config));
  REQUIRE(q);
  const LogicalTensor& w = qd::only_logical(*q);
  CHECK((w.experts == 4 && w.rows == 4 * 256 && w.cols == 320));
  CHECK(w.dequantized_shape() == Shape{4, 256, 320});
  CHECK((w.params.scale_layout == ScaleLayout::kBlock && w.params.block_rows == 128));
  // A per-expert scale of the wrong shape names the part and says it is per expert.
  auto bad = detect_quantization(
      qd::make_catalog(qd::with(fp8, p + ".weight_scale_inv", DType::kF32, Shape{4, 2, 2}), fp8_config));
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code() == Errc::kCorrupt);
  CHECK_THAT(bad.error().message(), Catch::Contains("expected F16, BF16 or F32 [2, 3] per expert of 4"));
  // A part without the leading expert dim.
  bad = detect_quantization(
      qd::make_catalog(qd::with(fp8, p + ".weight_scale_inv", DType::kF32, Shape{2, 3}), fp8_config));
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message(),
             Catch::Contains("part weight_scale_inv of 4 stacked experts is [2, 3]: expected [4, ...]"));
  CHECK(bad.error().tensor() == std::optional<std::string_view>(p + ".weight_scale_inv"));

  // GPTQ 4-bit group 128 with g_idx, 2 experts of N 64, K 256 (vLLM's w13_qweight layout).
  std::vector<T> gptq = {{p + ".qweight", DType::kI32, Shape{2, 32, 64}},
                         {p + ".qzeros", DType::kI32, Shape{2, 2, 8}},
                         {p + ".scales", DType::kF16, Shape{2, 2, 64}},
                         {p + ".g_idx", DType::kI32, Shape{2, 256}}};
  q = detect_quantization(qd::make_catalog(gptq, qd::kGptq));
  REQUIRE(q);
  CHECK((qd::only_logical(*q).experts == 2 && qd::only_logical(*q).dequantized_shape() == Shape{2, 64, 256}));
  CHECK_FALSE(detect_quantization(qd::make_catalog(qd::with(gptq, p + ".g_idx", DType::kI32, Shape{256}), qd::kGptq)));

  // compressed-tensors pack-quantized: weight_shape stacked too, one (N, K) per expert.
  std::vector<T> ct = {{p + ".weight_packed", DType::kI32, Shape{3, 64, 32}},
                       {p + ".weight_scale", DType::kBF16, Shape{3, 64, 2}},
                       {p + ".weight_shape", DType::kI64, Shape{3, 2}}};
  q = detect_quantization(qd::make_catalog(ct, qd::ct_config(qd::kW4A16, "pack-quantized")));
  REQUIRE(q);
  CHECK((qd::only_logical(*q).experts == 3 && qd::only_logical(*q).dequantized_shape() == Shape{3, 64, 256}));
  // A 2-D weight stays unstacked.
  std::vector<T> plain2d = {{p + ".weight", DType::kF8_E4M3, Shape{256, 320}},
                            {p + ".weight_scale_inv", DType::kF32, Shape{2, 3}}};
  q = detect_quantization(qd::make_catalog(plain2d, fp8_config));
  REQUIRE(q);
  CHECK((qd::only_logical(*q).experts == 0 && qd::only_logical(*q).rows == 256));
}

// Strided views (formats::TensorEntry::strides, torch.save of transposed or stepped tensors)
// through real loads: each tensor arrives row-major, equal to indexing its storage element by
// element here; converted by a dtype policy, quantized on load, and cut per tensor rank as a
// row-major tensor of the same values would be. mmap mode refuses them by name.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>

#include "qload/formats/convert.hpp"
#include "qload/formats/quant_codec.hpp"
#include "qload/formats/strided.hpp"
#include "qload/scheduler/load.hpp"
#include "scheduler/strided_checkpoint.hpp"

using namespace qload;
using namespace qload::scheduler;
using namespace qload::testing;
using namespace qload::testing::strided_views;

namespace {

bool same_bytes(const DeviceTensor* t, std::span<const std::byte> want) {
  return t != nullptr && t->nbytes == want.size() && std::memcmp(t->data, want.data(), want.size()) == 0;
}

std::vector<std::byte> to_f32(std::span<const std::byte> bf16) {
  std::vector<std::byte> out(bf16.size() * 2);
  REQUIRE(formats::convert(bf16, DType::kBF16, out, DType::kF32));
  return out;
}

// The FP8 per-tensor weight and scale of the BF16 [rows, cols] `values`.
std::pair<std::vector<std::byte>, std::vector<std::byte>> fp8(std::span<const std::byte> values, std::uint64_t rows,
                                                              std::uint64_t cols) {
  const formats::QuantizedLayout layout =
      formats::quantized_layout(rows, cols, formats::QuantizeTarget::kFp8Tensor).value();
  std::vector<std::byte> w(layout.weight_bytes), s(layout.scale_bytes);
  REQUIRE(formats::quantize(values, DType::kBF16, rows, cols, formats::QuantizeTarget::kFp8Tensor, w, s));
  return {w, s};
}

}  // namespace

TEST_CASE("strided: views load row-major, as stored, converted or quantized", "[scheduler][strided]") {
  const StridedCheckpoint c;
  LoadOptions o = host_devices(1);
  o.digests = LoadOptions::Digests::kOn;
  auto model = load(c.catalog, o);
  if (!model) FAIL(model.error().to_string());
  REQUIRE(model->size() == 4);
  for (const char* name : {kQ, kO, kNorm, kGate}) {
    INFO(name);
    const DeviceTensor* t = model->find(name);
    REQUIRE(t != nullptr);
    CHECK(t->shape == c.catalog.find(name)->shape);
    CHECK(t->dtype == DType::kBF16);
    CHECK(same_bytes(t, c.dense(name)));
  }
  // Every stored byte is still verified: the spans' digests are in the report.
  CHECK(model->report().digests.size() == 4);

  o.plan.dtype = DType::kF32;
  auto f32 = load(c.catalog, o);
  if (!f32) FAIL(f32.error().to_string());
  for (const char* name : {kQ, kO, kNorm, kGate}) {
    INFO(name);
    CHECK(f32->find(name)->dtype == DType::kF32);
    CHECK(same_bytes(f32->find(name), to_f32(c.dense(name))));
  }

  o.plan.dtype.reset();
  o.plan.quantize = formats::QuantizeTarget::kFp8Tensor;
  auto quantized = load(c.catalog, o);
  if (!quantized) FAIL(quantized.error().to_string());
  const auto [qw, qs] = fp8(c.dense(kQ), kCols, kRows);
  CHECK(same_bytes(quantized->find(kQ), qw));
  CHECK(same_bytes(quantized->find("model.layers.0.self_attn.q_proj.weight_scale"), qs));
  CHECK(same_bytes(quantized->find(kNorm), c.dense(kNorm)));  // not a weight quantize-on-load takes
}

TEST_CASE("strided: tensor parallel cuts each view as its row-major values", "[scheduler][strided][parallel]") {
  const StridedCheckpoint c;
  LoadOptions o = host_devices(2);
  o.plan.parallel = {.tensor = 2};
  o.plan.split = [](std::string_view name) -> Result<std::optional<Split>> {  // q_proj by rows, not heads
    return name == kQ ? std::optional<Split>(Split::kRows) : std::optional<Split>();
  };
  auto model = load(c.catalog, o);
  if (!model) FAIL(model.error().to_string());
  o.plan.quantize = formats::QuantizeTarget::kFp8Tensor;
  auto quantized = load(c.catalog, o);
  if (!quantized) FAIL(quantized.error().to_string());
  for (std::uint64_t r = 0; r < 2; ++r) {
    const std::string device = Device{.index = static_cast<int>(r)}.to_string();
    INFO(device);
    const std::vector<std::byte> q = c.dense(kQ, r * kCols / 2, (r + 1) * kCols / 2);
    CHECK(same_bytes(model->find(kQ, device), q));
    CHECK(model->find(kQ, device)->shape == Shape{kCols / 2, kRows});
    CHECK(same_bytes(model->find(kO, device), c.dense(kO, 0, UINT64_MAX, r * kCols / 4, (r + 1) * kCols / 4)));
    CHECK(same_bytes(model->find(kNorm, device), c.dense(kNorm)));
    CHECK(same_bytes(model->find(kGate, device), c.dense(kGate, r * 8, (r + 1) * 8)));
    // Each rank quantizes its own slice (as a rank of a server quantizing online would).
    const auto [qw, qs] = fp8(q, kCols / 2, kRows);
    CHECK(same_bytes(quantized->find(kQ, device), qw));
    CHECK(same_bytes(quantized->find("model.layers.0.self_attn.q_proj.weight_scale", device), qs));
  }
}

TEST_CASE("strided: mmap mode refuses a view by name, and loads refuse a view past its file or its expansion bound",
          "[scheduler][strided]") {
  StridedCheckpoint c;
  LoadOptions o = host_devices(1);
  o.plan.mode = LoadMode::kMmap;
  auto mapped = load(c.catalog, o);
  REQUIRE_FALSE(mapped);
  CHECK(mapped.error().code() == Errc::kUnsupported);
  CHECK(mapped.error().tensor() == std::optional<std::string_view>(kQ));
  formats::TensorEntry& q = c.catalog.tensors.front();
  q.strides = {1, kCols + 1};  // reaches one row further than the file holds
  q.nbytes = formats::strided_span_bytes(q.shape, q.strides, q.dtype).value();
  auto past = load(c.catalog, host_devices(1));
  REQUIRE_FALSE(past);
  CHECK(past.error().code() == Errc::kTruncated);
  CHECK(past.error().tensor() == std::optional<std::string_view>(kQ));
  const Shape shape = q.shape;
  q.shape = Shape{32768, 16384};  // one element as 1 GB: refused before anything is allocated
  q.strides = {0, 0};
  q.nbytes = 2;
  auto expanded = load(c.catalog, host_devices(1));
  REQUIRE_FALSE(expanded);
  CHECK(expanded.error().code() == Errc::kUnsupported);
  CHECK(expanded.error().tensor() == std::optional<std::string_view>(kQ));
  CHECK_THAT(expanded.error().message(), Catch::Contains("elements overlap"));
  q.shape = shape;
  q.strides = {1, kCols};
  q.nbytes = kRows * kCols * 2 - 2;  // a span that disagrees with shape and strides
  auto wrong = load(c.catalog, host_devices(1));
  REQUIRE_FALSE(wrong);
  CHECK(wrong.error().code() == Errc::kCorrupt);
  CHECK_THAT(wrong.error().message(), Catch::Contains("strided view"));
}

// Splits inside every expert of a stacked quantized weight (expert_rows, expert_halves,
// expert_cols): each rank's parts, cut from the stored bytes as the plan's slices say, must
// decode to exactly that rank's slice of every expert of the whole weight decoded. Every scheme
// that splits, in geometries whose rank boundaries fall on packed words, groups and blocks.
#include <catch2/catch.hpp>

#include "formats/quant_device_cases.hpp"
#include "plan/quant_sharding.hpp"

using namespace qload;
using namespace qload::scheduler;
using namespace qload::testing::quant_ref;

namespace {

// The bytes a shard of a part of `shape` takes: each listed row of the slice's view, its
// columns [col_begin, col_end).
std::vector<std::byte> cut(const OwnedPart& part, const ShardSlice& s) {
  if (!s.literal.empty()) return s.literal;
  const std::uint64_t rows = view_row_count(part.shape, s);
  const std::uint64_t row_bytes = part.bytes.size() / rows;
  const std::uint64_t numel = std::max<std::uint64_t>(1, part.shape.numel().value_or(1));
  const std::uint64_t element = part.bytes.size() / numel;
  std::vector<std::byte> out;
  for (const auto& [first, last] : s.rows)
    for (std::uint64_t r = first; r < last; ++r) {
      const auto* row = part.bytes.data() + r * row_bytes;
      out.insert(out.end(), row + s.col_begin * element, row + s.col_end * element);
    }
  return out;
}

std::vector<float> decode(const formats::LogicalTensor& t, std::span<const formats::PartBytes> parts) {
  std::vector<float> out(t.rows * t.cols);
  const Status st = formats::dequantize_rows(t, parts, 0, t.rows, DType::kF32, std::as_writable_bytes(std::span(out)));
  if (!st) FAIL(st.error().to_string());
  return out;
}

// Rank r's rows and columns of one expert [n, k] under `split` over 2 ranks.
struct Cut {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> rows;
  std::uint64_t col_begin, col_end;
};
Cut logical_cut(Split split, std::uint64_t n, std::uint64_t k, std::uint32_t r) {
  if (split == Split::kExpertCols) return {{{0, n}}, r * k / 2, (r + 1) * k / 2};
  if (split == Split::kExpertRows) return {{{r * n / 2, (r + 1) * n / 2}}, 0, k};
  return {{{r * n / 4, (r + 1) * n / 4}, {n / 2 + r * n / 4, n / 2 + (r + 1) * n / 4}}, 0, k};
}

void check_splits(const std::string& label, const std::vector<Weight>& experts) {
  std::vector<const Weight*> pointers;
  for (const Weight& w : experts) pointers.push_back(&w);
  Weight w = stack_experts(pointers);
  formats::Catalog catalog;
  for (std::uint32_t i = 0; i < w.parts.size(); ++i) {
    const OwnedPart& p = w.parts[i];
    catalog.tensors.push_back(
        formats::TensorEntry{.name = "e." + p.role, .nbytes = p.bytes.size(), .dtype = p.dtype, .shape = p.shape});
    w.t.parts.emplace_back(p.role, i);
  }
  const std::uint64_t e = w.t.experts, n = w.t.rows / e, k = w.t.cols;
  const std::vector<float> whole = decode(w.t, w.views());
  for (const Split split : {Split::kExpertRows, Split::kExpertHalves, Split::kExpertCols}) {
    INFO(label << ", " << split_name(split));
    const Result<detail::QuantShards> shards = detail::quantized_shard_slices(catalog, w.t, split, 2, {});
    if (!shards) FAIL(shards.error().to_string());
    CHECK(shards->experts == e);
    for (std::uint32_t r = 0; r < 2; ++r) {
      formats::LogicalTensor t = w.t;
      std::tie(t.rows, t.cols) = shards->dims[r];
      t.params.groups = shards->groups;
      t.shape = Shape{e, t.rows / e, t.cols};
      std::vector<std::vector<std::byte>> bytes;
      std::vector<formats::PartBytes> parts;
      for (std::size_t p = 0; p < w.parts.size(); ++p) bytes.push_back(cut(w.parts[p], shards->parts[p][r]));
      for (std::size_t p = 0; p < w.parts.size(); ++p)
        parts.push_back({w.parts[p].role, w.parts[p].dtype, shards->parts[p][r].shape, bytes[p]});
      const std::vector<float> got = decode(t, parts);
      std::vector<float> want;
      const Cut c = logical_cut(split, n, k, r);
      for (std::uint64_t x = 0; x < e; ++x)
        for (const auto& [first, last] : c.rows)
          for (std::uint64_t row = first; row < last; ++row)
            for (std::uint64_t col = c.col_begin; col < c.col_end; ++col)
              want.push_back(whole[(x * n + row) * k + col]);
      REQUIRE(got.size() == want.size());
      CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
    }
  }
}

template <typename Make>
std::vector<Weight> three(Make make) {
  return {make(), make(), make()};
}

}  // namespace

TEST_CASE("splits inside stacked experts: every rank's parts decode to its slice of every expert, every scheme",
          "[scheduler][experts][parallel]") {
  Rng rng(29);
  for (const bool act_order : {false, true})
    for (const unsigned bits : {4u, 8u})
      check_splits(fmt::format("gptq {}-bit asym{}", bits, act_order ? " act-order" : ""), three([&] {
                     return make_gptq({bits, 32, 2, false, act_order, DType::kF16}, 256, 128, rng);
                   }));
  check_splits("gptq v1", three([&] { return make_gptq({4, 32, 1, false, false, DType::kBF16}, 256, 128, rng); }));
  check_splits("awq gemm", three([&] { return make_awq_gemm(256, 128, 64, rng); }));
  for (const ScaleLayout layout : {ScaleLayout::kTensor, ScaleLayout::kRow, ScaleLayout::kBlock})
    check_splits(fmt::format("fp8 layout {}", static_cast<int>(layout)),
                 three([&] { return fp8_weight(DType::kF8_E4M3, layout, DType::kF32, 512, 256, rng); }));
  for (const bool sym : {true, false})
    check_splits(fmt::format("ct packed 4-bit {}", sym ? "sym" : "asym"),
                 three([&] { return make_ct_packed(CtCase{.bits = 4, .sym = sym, .group = 32}, 256, 128, rng); }));
  check_splits("nvfp4", three([&] { return nvfp4_weight(128, 256, rng); }));
  check_splits("mxfp4 (gpt-oss)", three([&] { return mxfp4_weight(128, 256, rng); }));
  check_splits("mxfp4 (compressed-tensors)", three([&] { return ct_mxfp4_weight(128, 256, rng); }));
  check_splits("ggml Q4_K", three([&] { return ggml_weight(kGgmlBlockTypes[8], 64, 512, rng); }));
  check_splits("ggml Q8_0", three([&] { return ggml_weight(kGgmlBlockTypes[4], 64, 256, rng); }));
}

TEST_CASE("splits inside stacked experts refuse boundaries inside a block, naming the part", "[scheduler][experts]") {
  Rng rng(31);
  const Weight a = fp8_weight(DType::kF8_E4M3, ScaleLayout::kBlock, DType::kF32, 256, 256, rng);
  const Weight b = fp8_weight(DType::kF8_E4M3, ScaleLayout::kBlock, DType::kF32, 256, 256, rng);
  Weight w = stack_experts({&a, &b});
  formats::Catalog catalog;
  for (std::uint32_t i = 0; i < w.parts.size(); ++i) {
    catalog.tensors.push_back(formats::TensorEntry{.name = "e." + w.parts[i].role,
                                                   .nbytes = w.parts[i].bytes.size(),
                                                   .dtype = w.parts[i].dtype,
                                                   .shape = w.parts[i].shape});
    w.t.parts.emplace_back(w.parts[i].role, i);
  }
  // N 256 in halves over 2 ranks: 64-row pieces of 128-row scale blocks.
  const auto halves = detail::quantized_shard_slices(catalog, w.t, Split::kExpertHalves, 2, {});
  REQUIRE_FALSE(halves);
  CHECK_THAT(halves.error().message(), Catch::Contains("falls inside a packed word, group or scale block"));
  CHECK(halves.error().tensor() == std::optional<std::string_view>(w.t.name));
  // Over 4 ranks by experts: 2 experts do not split 4 ways.
  const auto experts = detail::quantized_shard_slices(catalog, w.t, Split::kExperts, 4, {});
  REQUIRE_FALSE(experts);
  CHECK_THAT(experts.error().message(), Catch::Contains("cannot split 2 stacked experts over 4 ranks"));
}

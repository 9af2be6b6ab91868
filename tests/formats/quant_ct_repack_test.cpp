// Integer quantized schemes, compressed-tensors pack-quantized and int-quantized: decoders
// (quant_codec.hpp dequantize_rows) and encoders (quant_pack.hpp); and repackers between schemes
// (GPTQ v1 -> v2 zeros, AWQ GEMM -> GPTQ, GPTQ act-order sort). Checked against the bit-by-bit
// reference in quant_int_reference.hpp. Random data come from fixed seeds. GPTQ and AWQ:
// quant_int_test.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "qload/formats/quant.hpp"
#include "qload/formats/quant_codec.hpp"
#include "qload/formats/quant_pack.hpp"
#include "qload/runtime/dtype.hpp"
#include "qload/runtime/error.hpp"

#include "quant_int_reference.hpp"

using namespace qload;
using namespace qload::formats;
using namespace qload::testing::quant_ref;

namespace {

// ---- compressed-tensors --------------------------------------------------------------------

std::string describe(const CtCase& c) {
  return fmt::format("bits {} {} {} {} layout {} group {}", c.bits, c.dense ? "dense" : "padded",
                     c.sym ? "sym" : "asym", c.g_idx ? "g_idx" : "no g_idx", static_cast<int>(c.layout), c.group);
}

RefStream ct_row_stream(std::uint64_t k, std::uint64_t n, unsigned bits, bool dense) {
  return contiguous(n * ct_words(k, bits, dense), bits, !dense);
}
RefStream ct_zero_stream(std::uint64_t groups, std::uint64_t g, unsigned bits, bool dense) {
  return strided(g, groups, bits, !dense);
}

// Signed value q[n, k] and zero point zp[n, g] (offset binary removed; zp = 0 when symmetric).
std::int64_t ref_ct_q(const Weight& w, std::uint64_t n, std::uint64_t k) {
  const QuantParams& p = w.t.params;
  return static_cast<std::int64_t>(
             ref_get(w.bytes("weight_packed"), ct_row_stream(w.t.cols, n, p.bits, p.dense_bitstream), k)) -
         (std::int64_t{1} << (p.bits - 1));
}
std::int64_t ref_ct_zp(const Weight& w, std::uint64_t groups, std::uint64_t n, std::uint64_t g) {
  const QuantParams& p = w.t.params;
  if (p.sym) return 0;
  return static_cast<std::int64_t>(
             ref_get(w.bytes("weight_zero_point"), ct_zero_stream(groups, g, p.bits, p.dense_bitstream), n)) -
         (std::int64_t{1} << (p.bits - 1));
}

std::vector<float> ref_ct_packed(const Weight& w) {
  const std::uint64_t n_cols = w.t.rows;
  const std::uint64_t k_cols = w.t.cols;
  const bool grouped = w.t.params.scale_layout == ScaleLayout::kGroup;
  const std::uint64_t groups = grouped ? ref_ceil(k_cols, w.t.params.group_size) : 1;
  std::vector<float> out(n_cols * k_cols);
  for (std::uint64_t n = 0; n < n_cols; ++n)
    for (std::uint64_t k = 0; k < k_cols; ++k) {
      const OwnedPart* g_idx = w.find("weight_g_idx");
      const std::uint64_t g = g_idx != nullptr ? static_cast<std::uint64_t>(ref_int(g_idx->bytes, DType::kI32, k))
                              : grouped        ? k / w.t.params.group_size
                                               : 0;
      const float s = ref_scale(w.bytes("weight_scale"), DType::kBF16, n * groups + g);
      out[n * k_cols + k] = ref_w(s, ref_ct_q(w, n, k), ref_ct_zp(w, groups, n, g));
    }
  return out;
}

std::vector<CtCase> all_ct_cases() {
  std::vector<CtCase> cases;
  for (unsigned bits : {2u, 3u, 4u, 8u})
    for (bool dense : {true, false})
      for (bool sym : {true, false})
        for (bool g_idx : {false, true}) cases.push_back({bits, dense, sym, g_idx, ScaleLayout::kGroup, 32});
  for (unsigned bits : {4u, 8u})
    for (bool sym : {true, false}) cases.push_back({bits, true, sym, false, ScaleLayout::kRow, 0});
  cases.push_back({4, true, false, false, ScaleLayout::kGroup, 128});  // one (partial) group
  return cases;
}

TEST_CASE("compressed-tensors pack-quantized decodes like the reference", "[quant]") {
  Rng rng(0x6374000000000001);
  const std::uint64_t k = 100;  // rows end in a partial word; groups of 32 end in a partial group
  const std::uint64_t n = 45;
  for (const CtCase& c : all_ct_cases()) {
    INFO(describe(c));
    const Weight w = make_ct_packed(c, k, n, rng);
    const std::vector<float> full = decode(w);
    require_same(full, ref_ct_packed(w), k);
    check_row_ranges(w, full, rng);
  }
}

TEST_CASE("pack_ct writes the producers' bytes and decodes to (q - zp) * s", "[quant]") {
  Rng rng(0x6374000000000002);
  const std::uint64_t k = 70;
  const std::uint64_t n = 21;
  for (const CtCase& c : all_ct_cases()) {
    INFO(describe(c));
    const Weight w = make_ct_packed(c, k, n, rng);
    const std::uint64_t groups = ct_groups(c, k);
    std::vector<std::int8_t> q;
    std::vector<std::int8_t> zp;
    for (std::uint64_t r = 0; r < n; ++r) {
      for (std::uint64_t kk = 0; kk < k; ++kk) q.push_back(static_cast<std::int8_t>(ref_ct_q(w, r, kk)));
      if (!c.sym)
        for (std::uint64_t g = 0; g < groups; ++g) zp.push_back(static_cast<std::int8_t>(ref_ct_zp(w, groups, r, g)));
    }
    Bytes packed(w.bytes("weight_packed").size());
    Bytes zero_point(c.sym ? 0 : w.bytes("weight_zero_point").size());
    REQUIRE(pack_ct(w.t, q, zp, packed, zero_point).has_value());
    const std::uint32_t offset = 1u << (c.bits - 1);
    Bytes want(packed.size());
    for (std::uint64_t r = 0; r < n; ++r)
      for (std::uint64_t kk = 0; kk < k; ++kk)
        ref_put(want, ct_row_stream(k, r, c.bits, c.dense), kk, static_cast<std::uint32_t>(q[r * k + kk] + offset));
    CHECK(packed == want);
    Weight out = w;
    out.part("weight_packed").bytes = packed;
    if (!c.sym) {
      Bytes want_z(zero_point.size());
      for (std::uint64_t r = 0; r < n; ++r)
        for (std::uint64_t g = 0; g < groups; ++g)
          ref_put(want_z, ct_zero_stream(groups, g, c.bits, c.dense), r,
                  static_cast<std::uint32_t>(zp[r * groups + g] + offset));
      CHECK(zero_point == want_z);
      out.part("weight_zero_point").bytes = zero_point;
    }
    std::vector<float> expect(n * k);
    for (std::uint64_t r = 0; r < n; ++r)
      for (std::uint64_t kk = 0; kk < k; ++kk) {
        const std::uint64_t g = c.g_idx                           ? ref_group(w, "weight_g_idx", kk)
                                : c.layout == ScaleLayout::kGroup ? kk / c.group
                                                                  : 0;
        const float s = ref_scale(w.bytes("weight_scale"), DType::kBF16, r * groups + g);
        expect[r * k + kk] = ref_w(s, q[r * k + kk], c.sym ? 0 : zp[r * groups + g]);
      }
    require_same(decode(out), expect, k);
  }
}

TEST_CASE("compressed-tensors pack-quantized checks its parts", "[quant]") {
  Rng rng(0x6374000000000003);
  const Weight good = make_ct_packed({.bits = 4, .sym = false, .g_idx = true}, 64, 16, rng);
  Weight w = good;
  w.drop("weight_zero_point");
  require_corrupt_naming(decode_error(w), "weight_zero_point");
  w = good;
  w.part("weight_packed").bytes.resize(w.bytes("weight_packed").size() - 4);
  require_corrupt_naming(decode_error(w), "weight_packed");
  w = good;
  const std::int32_t bad = 2;  // 2 groups of 32
  std::memcpy(w.part("weight_g_idx").bytes.data() + 5 * 4, &bad, 4);
  Error e = decode_error(w);
  require_corrupt_naming(e, "weight_g_idx");
  CHECK(e.message().find("entry 5 is 2") != std::string::npos);
  w = good;
  const std::int64_t wrong_k = 65;
  std::memcpy(w.part("weight_shape").bytes.data() + 8, &wrong_k, 8);
  require_corrupt_naming(decode_error(w), "weight_shape");
}

struct CtIntCase {
  ScaleLayout layout = ScaleLayout::kGroup;
  DType zero_dtype = DType::kI8;  // kBool: no zero point (symmetric)
  bool g_idx = false;
};

TEST_CASE("compressed-tensors int-quantized decodes like the reference", "[quant]") {
  Rng rng(0x6374000000000004);
  const std::uint64_t k = 90;
  const std::uint64_t n = 13;
  const std::uint64_t group = 32;
  std::vector<CtIntCase> cases;
  for (ScaleLayout layout : {ScaleLayout::kGroup, ScaleLayout::kRow, ScaleLayout::kTensor})
    for (DType zd : {DType::kBool, DType::kI8, DType::kI32}) cases.push_back({layout, zd, false});
  cases.push_back({ScaleLayout::kGroup, DType::kI32, true});
  cases.push_back({ScaleLayout::kGroup, DType::kBool, true});
  for (const CtIntCase& c : cases) {
    INFO("layout " << static_cast<int>(c.layout) << " zero " << dtype_name(c.zero_dtype) << " g_idx " << c.g_idx);
    Weight w;
    w.t.name = kName;
    w.t.rows = n;
    w.t.cols = k;
    w.t.params = {.scheme = QuantScheme::kCtInt,
                  .bits = 8,
                  .group_size = group,
                  .sym = c.zero_dtype == DType::kBool,
                  .scale_layout = c.layout,
                  .weight_dtype = DType::kI8,
                  .scale_dtype = DType::kF32};
    const std::uint64_t groups = c.layout == ScaleLayout::kGroup ? ref_ceil(k, group) : 1;
    const std::uint64_t params = c.layout == ScaleLayout::kTensor ? 1 : n * groups;
    const Shape pshape = c.layout == ScaleLayout::kTensor ? Shape{1}
                         : c.layout == ScaleLayout::kRow  ? Shape{n, 1}
                                                          : Shape{n, groups};
    w.add("weight", DType::kI8, Shape{n, k}, random_bytes(n * k, rng));
    w.add("weight_scale", DType::kF32, pshape, random_scales(params, DType::kF32, rng));
    if (c.zero_dtype == DType::kI8) w.add("weight_zero_point", DType::kI8, pshape, random_bytes(params, rng));
    if (c.zero_dtype == DType::kI32) {
      std::vector<std::int32_t> z(params);
      for (std::int32_t& v : z) v = static_cast<std::int32_t>(rng() % 256) - 128;
      w.add("weight_zero_point", DType::kI32, pshape, i32_bytes(z));
    }
    if (c.g_idx) w.add("weight_g_idx", DType::kI32, Shape{k}, i32_bytes(act_order_g_idx(k, group, rng)));
    std::vector<float> expect(n * k);
    for (std::uint64_t r = 0; r < n; ++r)
      for (std::uint64_t kk = 0; kk < k; ++kk) {
        const std::uint64_t g = c.g_idx ? ref_group(w, "weight_g_idx", kk) : kk / group;
        const std::uint64_t pi = c.layout == ScaleLayout::kTensor ? 0
                                 : c.layout == ScaleLayout::kRow  ? r
                                                                  : r * groups + g;
        const OwnedPart* zp = w.find("weight_zero_point");
        const std::int64_t z = zp != nullptr ? ref_int(zp->bytes, zp->dtype, pi) : 0;
        expect[r * k + kk] = ref_w(ref_scale(w.bytes("weight_scale"), DType::kF32, pi),
                                   ref_int(w.bytes("weight"), DType::kI8, r * k + kk), z);
      }
    const std::vector<float> full = decode(w);
    require_same(full, expect, k);
    check_row_ranges(w, full, rng);
  }
}

// ---- repacking -----------------------------------------------------------------------------

TEST_CASE("GPTQ v1 zeros converted to v2 decode to the same weight", "[quant]") {
  Rng rng(0x7265706b00000001);
  for (unsigned bits : {2u, 3u, 4u, 8u})
    for (bool sym : {true, false}) {
      INFO("bits " << bits << (sym ? " sym" : " asym"));
      const Weight v1 = make_gptq({.bits = bits, .group = 32, .version = 1, .sym = sym}, 128, 37, rng);
      Weight v2 = v1;
      v2.t.params.gptq_version = 2;
      REQUIRE(gptq_v1_zeros_to_v2(v1.t, v1.bytes("qzeros"), v2.part("qzeros").bytes).has_value());
      require_same(decode(v2), decode(v1), 128);
      if (sym) {  // v2 symmetric zeros are the reference writer's 2^(b-1) fields
        Weight expect = make_gptq({.bits = bits, .group = 32, .version = 2, .sym = true}, 128, 37, rng);
        CHECK(v2.bytes("qzeros") == expect.bytes("qzeros"));
      }
      // In place.
      Weight same = v1;
      Bytes& z = same.part("qzeros").bytes;
      REQUIRE(gptq_v1_zeros_to_v2(v1.t, z, z).has_value());
      CHECK(z == v2.bytes("qzeros"));
    }
}

TEST_CASE("AWQ GEMM repacked as GPTQ v2 decodes to the same weight", "[quant]") {
  Rng rng(0x7265706b00000002);
  for (std::uint64_t group : {32u, 128u})
    for (std::uint64_t n : {40u, 44u}) {
      INFO("group " << group << " N " << n);
      const Weight awq = make_awq_gemm(256, n, group, rng);
      Weight gptq;
      gptq.t = awq_gemm_as_gptq(awq.t);
      const Result<PackedShapes> shapes = packed_shapes(gptq.t);
      REQUIRE(shapes.has_value());
      Bytes qweight(shapes->weight.nbytes(DType::kI32).value());
      Bytes qzeros(shapes->zeros.nbytes(DType::kI32).value());
      REQUIRE(awq_gemm_to_gptq(awq.t, awq.bytes("qweight"), awq.bytes("qzeros"), qweight, qzeros).has_value());
      gptq.add("qweight", DType::kI32, shapes->weight, qweight);
      gptq.add("qzeros", DType::kI32, shapes->zeros, qzeros);
      gptq.add("scales", DType::kF16, shapes->scales, awq.bytes("scales"));
      require_same(decode(gptq), decode(awq), 256);
      // The reference reads GPTQ's natural-order zeros out of the result as AWQ's.
      for (std::uint64_t c = 0; c < n; ++c)
        CHECK(ref_get(qzeros, gptq_z_stream(n, 0, 4), c) == ref_awq_gemm_get(awq.bytes("qzeros"), n, 0, c));
    }
}

TEST_CASE("GPTQ act-order sort makes groups contiguous and its permutation restores the weight", "[quant]") {
  Rng rng(0x7265706b00000003);
  for (unsigned bits : {2u, 3u, 4u, 8u})
    for (std::uint64_t group : {32u, 64u}) {
      INFO("bits " << bits << " group " << group);
      const std::uint64_t k = 192;
      const std::uint64_t n = 21;
      const Weight w =
          make_gptq({.bits = bits, .group = group, .version = 2, .sym = false, .act_order = true}, k, n, rng);
      std::vector<std::int32_t> perm(k);
      Bytes qweight(w.bytes("qweight").size());
      Bytes g_idx(k * 4);
      REQUIRE(gptq_act_order_sort(w.t, w.bytes("g_idx"), w.bytes("qweight"), perm, qweight, g_idx).has_value());
      // perm is a permutation, sorted by group, stable within a group.
      std::vector<std::int32_t> sorted = perm;
      std::sort(sorted.begin(), sorted.end());
      for (std::uint64_t i = 0; i < k; ++i) REQUIRE(sorted[i] == static_cast<std::int32_t>(i));
      for (std::uint64_t i = 1; i < k; ++i) {
        const std::int64_t ga = ref_int(w.bytes("g_idx"), DType::kI32, static_cast<std::uint64_t>(perm[i - 1]));
        const std::int64_t gb = ref_int(w.bytes("g_idx"), DType::kI32, static_cast<std::uint64_t>(perm[i]));
        REQUIRE((ga < gb || (ga == gb && perm[i - 1] < perm[i])));
      }
      // Act-order groups hold exactly G columns, so the sorted g_idx is k / G.
      for (std::uint64_t i = 0; i < k; ++i)
        REQUIRE(ref_int(g_idx, DType::kI32, i) == static_cast<std::int64_t>(i / group));
      Weight sorted_w = w;
      sorted_w.part("qweight").bytes = qweight;
      sorted_w.part("g_idx").bytes = g_idx;
      const std::vector<float> original = decode(w);
      const std::vector<float> permuted = decode(sorted_w);
      std::vector<float> restored(n * k);
      for (std::uint64_t r = 0; r < n; ++r)
        for (std::uint64_t i = 0; i < k; ++i)
          restored[r * k + static_cast<std::uint64_t>(perm[i])] = permuted[r * k + i];
      require_same(restored, original, k);
      // Contiguous groups need no g_idx at all.
      sorted_w.drop("g_idx");
      require_same(decode(sorted_w), permuted, k);
    }
  // An entry past the last group is corrupt.
  const Weight w = make_gptq({.bits = 4, .group = 32, .version = 2, .sym = false, .act_order = true}, 64, 8, rng);
  Bytes bad = w.bytes("g_idx");
  const std::int32_t two = 2;
  std::memcpy(bad.data() + 3 * 4, &two, 4);
  std::vector<std::int32_t> perm(64);
  Bytes qweight(w.bytes("qweight").size());
  Bytes g_idx(64 * 4);
  const Status st = gptq_act_order_sort(w.t, bad, w.bytes("qweight"), perm, qweight, g_idx);
  REQUIRE_FALSE(st.has_value());
  require_corrupt_naming(st.error(), "g_idx");
}

TEST_CASE("Encoders reject codes out of range and wrong sizes", "[quant]") {
  LogicalTensor t;
  t.name = kName;
  t.rows = 8;
  t.cols = 32;
  t.params = {.scheme = QuantScheme::kGptq, .bits = 4, .group_size = 32, .gptq_version = 2};
  std::vector<std::uint8_t> q(32 * 8, 3);
  std::vector<std::uint8_t> z(8, 8);
  Bytes qweight(4 * 8 * 4);
  Bytes qzeros(4);
  CHECK(pack_gptq(t, q, z, qweight, qzeros).has_value());
  q[17] = 16;
  CHECK(pack_gptq(t, q, z, qweight, qzeros).error().code() == Errc::kInvalidArgument);
  q[17] = 3;
  Bytes short_zeros(2);
  CHECK(pack_gptq(t, q, z, qweight, short_zeros).error().code() == Errc::kInvalidArgument);
  t.params.scheme = QuantScheme::kAwqGemm;
  CHECK(pack_gptq(t, q, z, qweight, qzeros).error().code() == Errc::kInvalidArgument);
}

}  // namespace

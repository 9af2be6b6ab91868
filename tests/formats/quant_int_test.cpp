// Integer quantized schemes, GPTQ v1/v2 and AWQ GEMM/GEMV: decoders (quant_codec.hpp
// dequantize_rows) and encoders (quant_pack.hpp), checked against the bit-by-bit reference in
// quant_int_reference.hpp. Random data come from fixed seeds; known answers come from formats.md.
// Compressed-tensors and repacking: quant_ct_repack_test.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "qload/formats/convert.hpp"
#include "qload/formats/quant.hpp"
#include "qload/formats/quant_codec.hpp"
#include "qload/formats/quant_pack.hpp"
#include "qload/runtime/dtype.hpp"
#include "qload/runtime/error.hpp"

#include "quant_device_cases.hpp"
#include "quant_int_reference.hpp"

using namespace qload;
using namespace qload::formats;
using namespace qload::testing::quant_ref;

namespace {

// ---- GPTQ ----------------------------------------------------------------------------------

RefStream gptq_q_stream(std::uint64_t n_cols, std::uint64_t n, unsigned bits) {
  return strided(n, n_cols, bits);
}

// The true zero point the reference reads for (group g, column n).
std::int64_t ref_gptq_zero(const Weight& w, std::uint64_t g, std::uint64_t n) {
  const unsigned b = w.t.params.bits;
  const std::uint32_t stored = ref_get(w.bytes("qzeros"), gptq_z_stream(w.t.rows, g, b), n);
  return w.t.params.gptq_version == 1 ? (stored + 1) % (1u << b) : stored;
}

std::vector<float> ref_gptq(const Weight& w) {
  const std::uint64_t n_cols = w.t.rows;
  const std::uint64_t k_cols = w.t.cols;
  const unsigned b = w.t.params.bits;
  std::vector<float> out(n_cols * k_cols);
  for (std::uint64_t n = 0; n < n_cols; ++n)
    for (std::uint64_t k = 0; k < k_cols; ++k) {
      const std::uint64_t g = ref_group(w, "g_idx", k);
      const std::uint32_t q = ref_get(w.bytes("qweight"), gptq_q_stream(n_cols, n, b), k);
      const float s = ref_scale(w.bytes("scales"), w.t.params.scale_dtype, g * n_cols + n);
      out[n * k_cols + k] = ref_w(s, q, ref_gptq_zero(w, g, n));
    }
  return out;
}

std::vector<GptqCase> all_gptq_cases() {
  std::vector<GptqCase> cases;
  for (unsigned bits : {2u, 3u, 4u, 8u})
    for (std::uint64_t group : {32u, 128u, 0u})
      for (unsigned version : {1u, 2u})
        for (bool sym : {true, false})
          for (bool act_order : {false, true}) cases.push_back({bits, group, version, sym, act_order});
  return cases;
}

std::string describe(const GptqCase& c) {
  return fmt::format("bits {} group {} v{} {} {} {}", c.bits, c.group == 0 ? -1 : static_cast<std::int64_t>(c.group),
                     c.version, c.sym ? "sym" : "asym", c.act_order ? "act-order" : "no g_idx",
                     dtype_name(c.scale_dtype));
}

TEST_CASE("GPTQ decodes every width, group size, version, zero kind and g_idx like the reference", "[quant]") {
  Rng rng(0x6770747100000001);
  const std::uint64_t k = 352;  // 11 x 32, not a multiple of 128
  const std::uint64_t n = 37;   // qzeros rows end in a partial word
  for (const GptqCase& c : all_gptq_cases()) {
    INFO(describe(c));
    const Weight w = make_gptq(c, k, n, rng);
    const std::vector<float> full = decode(w);
    require_same(full, ref_gptq(w), k);
    check_row_ranges(w, full, rng);
  }
}

TEST_CASE("GPTQ reads BF16 and F32 scales and unaligned parts", "[quant]") {
  Rng rng(0x6770747100000002);
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    INFO(dtype_name(dtype));
    GptqCase c{.bits = 3, .group = 64, .version = 1, .sym = false, .act_order = true, .scale_dtype = dtype};
    const Weight w = make_gptq(c, 128, 45, rng);
    require_same(decode(w), ref_gptq(w), 128);
  }
  // Parts that start one byte past a word boundary decode the same.
  const Weight w = make_gptq({.bits = 4, .group = 32, .version = 2, .sym = false}, 96, 19, rng);
  std::vector<Bytes> shifted;
  std::vector<PartBytes> views;
  for (const OwnedPart& p : w.parts) {
    Bytes b(p.bytes.size() + 1);
    std::copy(p.bytes.begin(), p.bytes.end(), b.begin() + 1);
    shifted.push_back(std::move(b));
  }
  for (std::size_t i = 0; i < w.parts.size(); ++i)
    views.push_back({w.parts[i].role, w.parts[i].dtype, w.parts[i].shape, std::span(shifted[i]).subspan(1)});
  std::vector<float> out(w.t.rows * w.t.cols);
  REQUIRE(dequantize_rows(w.t, views, 0, w.t.rows, DType::kF32, std::as_writable_bytes(std::span(out))).has_value());
  require_same(out, ref_gptq(w), w.t.cols);
}

TEST_CASE("GPTQ with a stored g_idx of k / G decodes like one without, and sorts to the identity", "[quant]") {
  Rng rng(0x6770747100000005);
  const std::uint64_t k = 160;
  Weight w = make_gptq({.bits = 4, .group = 64, .version = 1, .sym = false}, k, 23, rng);
  std::vector<std::int32_t> g_idx(k);
  for (std::uint64_t i = 0; i < k; ++i) g_idx[i] = static_cast<std::int32_t>(i / 64);
  const std::vector<float> without = decode(w);
  w.add("g_idx", DType::kI32, Shape{k}, i32_bytes(g_idx));
  require_same(decode(w), without, k);
  require_same(without, ref_gptq(w), k);
  std::vector<std::int32_t> perm(k);
  Bytes qweight(w.bytes("qweight").size());
  Bytes sorted(k * 4);
  REQUIRE(gptq_act_order_sort(w.t, w.bytes("g_idx"), w.bytes("qweight"), perm, qweight, sorted).has_value());
  for (std::uint64_t i = 0; i < k; ++i) CHECK(perm[i] == static_cast<std::int32_t>(i));
  CHECK(qweight == w.bytes("qweight"));
  CHECK(sorted == w.bytes("g_idx"));
}

// GPTQ with 2, 4 and 8 bits is written straight in the output dtype (rows_avx2.cpp, where the
// CPU has AVX2; the F32 decode goes that way too and meets the reference above), act-order too.
// Its BF16 and F16 must be the F32 decode converted, bit for bit: the split narrowing where a
// group's scale keeps every product zero or normal below 2^111, the NaN-keeping rounding
// elsewhere, so F32 scales at and around the edges of that range (below 2^107 for 4 bits, 2^103
// for 8, 2^109 for 2; from 2^-126 for all), zeros, infinities and NaNs.
constexpr float kEdgeScales[] = {std::numeric_limits<float>::quiet_NaN(),
                                 -std::numeric_limits<float>::infinity(),
                                 std::numeric_limits<float>::infinity(),
                                 0.0f,
                                 -0.0f,
                                 0x1p-127f,
                                 0x1p-126f,
                                 -0x1p-126f,
                                 0x1.fffffep102f,  // just below 2^103, 8 bits' edge
                                 0x1p103f,
                                 0x1.fffffep106f,  // just below 2^107, 4 bits' edge
                                 0x1p107f,
                                 0x1.fffffep108f,  // just below 2^109, 2 bits' edge
                                 -0x1p109f,
                                 -0x1.8p110f,  // past every width's edge: 3 x this overflows the split
                                 std::numeric_limits<float>::denorm_min(),
                                 std::bit_cast<float>(0xffb12345u)};  // a signalling NaN with a payload

// The scales [groups, N] (N >= 37) as F32, with kEdgeScales in group 0 from row 3 on and in the
// last group from row 20 on.
void set_edge_scales(Weight& w, std::uint64_t n) {
  OwnedPart& part = w.part("scales");
  if (part.dtype != DType::kF32) {
    Bytes f32(part.bytes.size() / 2 * 4);
    REQUIRE(convert(part.bytes, part.dtype, f32, DType::kF32).has_value());
    part.bytes = std::move(f32);
    part.dtype = DType::kF32;
    w.t.params.scale_dtype = DType::kF32;  // what the reference reads them as
  }
  const std::uint64_t last = part.bytes.size() / 4 - n;
  for (std::size_t i = 0; i < std::size(kEdgeScales); ++i) {
    std::memcpy(part.bytes.data() + (3 + i) * 4, &kEdgeScales[i], 4);
    std::memcpy(part.bytes.data() + (last + 20 + i) * 4, &kEdgeScales[i], 4);
  }
}

// BF16 and F16 of all rows and of rows [5, 30) against `f32` (all rows) converted.
void require_narrow_outputs_converted(const Weight& w, const std::vector<float>& f32) {
  const std::vector<PartBytes> views = w.views();
  for (const DType dtype : {DType::kBF16, DType::kF16})
    for (const auto& [begin, end] : {std::pair<std::uint64_t, std::uint64_t>{0, w.t.rows}, {5, 30}}) {
      INFO(dtype_name(dtype) << " rows " << begin << ".." << end);
      const std::size_t count = static_cast<std::size_t>((end - begin) * w.t.cols);
      Bytes want(count * 2), got(count * 2);
      REQUIRE(convert(std::as_bytes(std::span(f32)).subspan(begin * w.t.cols * 4, count * 4), DType::kF32, want, dtype)
                  .has_value());
      REQUIRE(dequantize_rows(w.t, views, begin, end, dtype, got).has_value());
      CHECK(got == want);
    }
}

TEST_CASE("GPTQ to BF16 and F16 equals the F32 decode converted, with scales at every edge", "[quant]") {
  Rng rng(0x6770747100000009);
  for (const unsigned bits : {2u, 3u, 4u, 8u})  // 3: the portable loop, for contrast
    for (const bool edges : {false, true})
      for (const std::uint64_t group : {32u, 128u, 0u})
        for (const unsigned version : {1u, 2u})
          for (const bool act_order : {false, true}) {
            INFO(bits << " bits, " << (edges ? "F32 edge" : "F16") << " scales, group " << group << ", v" << version
                      << (act_order ? ", act-order" : ""));
            // K = 17 x 32: a tile of 512 columns and a partial one; N = 37: a partial tile of 16 rows.
            Weight w = make_gptq(
                {.bits = bits, .group = group, .version = version, .sym = false, .act_order = act_order}, 544, 37, rng);
            if (edges) set_edge_scales(w, 37);
            const std::vector<float> f32 = decode(w);
            require_same(f32, ref_gptq(w), w.t.cols);
            require_narrow_outputs_converted(w, f32);
          }
}

// Integer codes read out of a GPTQ weight by the reference: q [K][N], true zeros [groups][N].
struct GptqCodes {
  std::vector<std::uint8_t> q;
  std::vector<std::uint8_t> z;
};
GptqCodes ref_gptq_codes(const Weight& w) {
  const std::uint64_t n = w.t.rows;
  const std::uint64_t k = w.t.cols;
  const unsigned b = w.t.params.bits;
  const std::uint64_t groups = ref_ceil(k, group_of(k, w.t.params.group_size));
  GptqCodes c;
  for (std::uint64_t kk = 0; kk < k; ++kk)
    for (std::uint64_t col = 0; col < n; ++col)
      c.q.push_back(static_cast<std::uint8_t>(ref_get(w.bytes("qweight"), gptq_q_stream(n, col, b), kk)));
  for (std::uint64_t g = 0; g < groups; ++g)
    for (std::uint64_t col = 0; col < n; ++col) c.z.push_back(static_cast<std::uint8_t>(ref_gptq_zero(w, g, col)));
  return c;
}

TEST_CASE("pack_gptq writes the producers' bytes and decodes to (q - z) * s", "[quant]") {
  Rng rng(0x6770747100000003);
  const std::uint64_t k = 160;
  const std::uint64_t n = 29;
  for (const GptqCase& c : all_gptq_cases()) {
    INFO(describe(c));
    const Weight w = make_gptq(c, k, n, rng);
    const GptqCodes codes = ref_gptq_codes(w);
    const Result<PackedShapes> shapes = packed_shapes(w.t);
    REQUIRE(shapes.has_value());
    CHECK(shapes->weight == w.find("qweight")->shape);
    CHECK(shapes->zeros == w.find("qzeros")->shape);
    CHECK(shapes->scales == w.find("scales")->shape);
    Bytes qweight(w.bytes("qweight").size());
    Bytes qzeros(w.bytes("qzeros").size());
    REQUIRE(pack_gptq(w.t, codes.q, codes.z, qweight, qzeros).has_value());
    // qweight has no spare bits: the random words come back exactly.
    CHECK(qweight == w.bytes("qweight"));
    // qzeros: the reference writer's bytes (stored z - 1 per field for v1, spare bits zero).
    Bytes want(qzeros.size());
    const std::uint64_t groups = codes.z.size() / n;
    const std::uint32_t mask = (1u << c.bits) - 1;
    for (std::uint64_t g = 0; g < groups; ++g)
      for (std::uint64_t col = 0; col < n; ++col) {
        const std::uint32_t z = codes.z[g * n + col];
        ref_put(want, gptq_z_stream(n, g, c.bits), col, c.version == 1 ? (z - 1) & mask : z);
      }
    CHECK(qzeros == want);
    // Decoding the packed parts gives (q - z) * s from the codes themselves.
    Weight packed = w;
    packed.part("qweight").bytes = qweight;
    packed.part("qzeros").bytes = qzeros;
    std::vector<float> expect(n * k);
    for (std::uint64_t col = 0; col < n; ++col)
      for (std::uint64_t kk = 0; kk < k; ++kk) {
        const std::uint64_t g = ref_group(w, "g_idx", kk);
        const float s = ref_scale(w.bytes("scales"), c.scale_dtype, g * n + col);
        expect[col * k + kk] = ref_w(s, codes.q[kk * n + col], codes.z[g * n + col]);
      }
    require_same(decode(packed), expect, k);
  }
}

// Words of one qzeros row for N = 32 columns all holding `z`, packed as `version`.
std::vector<std::uint32_t> symmetric_zero_words(unsigned bits, unsigned version) {
  LogicalTensor t;
  t.name = kName;
  t.rows = 32;
  t.cols = 32;
  t.params = {.scheme = QuantScheme::kGptq, .bits = bits, .group_size = 32, .gptq_version = version};
  std::vector<std::uint8_t> q(32 * 32, 0);
  std::vector<std::uint8_t> z(32, static_cast<std::uint8_t>(1u << (bits - 1)));
  Bytes qweight(32 / 32 * bits * 32 * 4);
  Bytes qzeros(bits * 4);
  REQUIRE(pack_gptq(t, q, z, qweight, qzeros).has_value());
  std::vector<std::uint32_t> words(bits);
  std::memcpy(words.data(), qzeros.data(), qzeros.size());
  return words;
}

TEST_CASE("GPTQ symmetric zero words match formats.md's known answers", "[quant]") {
  using W = std::vector<std::uint32_t>;
  CHECK(symmetric_zero_words(4, 1) == W{0x77777777u, 0x77777777u, 0x77777777u, 0x77777777u});
  CHECK(symmetric_zero_words(4, 2) == W{0x88888888u, 0x88888888u, 0x88888888u, 0x88888888u});
  CHECK(symmetric_zero_words(8, 1) == W(8, 0x7F7F7F7Fu));
  CHECK(symmetric_zero_words(2, 1) == W{0x55555555u, 0x55555555u});
  CHECK(symmetric_zero_words(3, 1) == W{0xDB6DB6DBu, 0xB6DB6DB6u, 0x6DB6DB6Du});

  // Decoding: q = 0 everywhere and scale 1 gives -z, so the words above decode to z = 2^(b-1).
  for (const auto& [bits, version, word] : {std::tuple{4u, 1u, 0x77777777u}, std::tuple{4u, 2u, 0x88888888u},
                                            std::tuple{8u, 1u, 0x7F7F7F7Fu}, std::tuple{2u, 1u, 0x55555555u}}) {
    INFO("bits " << bits << " v" << version);
    Weight w;
    w.t.name = kName;
    w.t.rows = 32;
    w.t.cols = 32;
    w.t.params = {.scheme = QuantScheme::kGptq, .bits = bits, .group_size = 32, .gptq_version = version};
    w.add("qweight", DType::kI32, Shape{bits, 32}, Bytes(bits * 32 * 4));
    Bytes qzeros(bits * 4);
    for (unsigned i = 0; i < bits; ++i) std::memcpy(qzeros.data() + i * 4, &word, 4);
    w.add("qzeros", DType::kI32, Shape{1, bits}, qzeros);
    Bytes scales(32 * 2);
    const std::uint16_t one = 0x3C00;  // f16 1.0
    for (int i = 0; i < 32; ++i) std::memcpy(scales.data() + i * 2, &one, 2);
    w.add("scales", DType::kF16, Shape{1, 32}, scales);
    const std::vector<float> out = decode(w);
    CHECK(std::all_of(out.begin(), out.end(), [bits](float v) { return v == -static_cast<float>(1u << (bits - 1)); }));
  }
}

TEST_CASE("GPTQ rejects wrong shapes and dtypes, missing parts and g_idx out of range", "[quant]") {
  Rng rng(0x6770747100000004);
  const Weight good = make_gptq({.bits = 4, .group = 32, .version = 2, .sym = false, .act_order = true}, 128, 24, rng);

  Weight w = good;  // one word row short
  w.part("qweight").bytes.resize(w.bytes("qweight").size() - 24 * 4);
  w.part("qweight").shape = Shape{15, 24};
  Error e = decode_error(w);
  require_corrupt_naming(e, "qweight");
  CHECK(e.message().find("[16, 24]") != std::string::npos);

  w = good;  // float words instead of int32
  w.part("qweight").dtype = DType::kF32;
  require_corrupt_naming(decode_error(w), "qweight");

  w = good;  // qzeros for 8-bit columns
  w.part("qzeros").bytes.resize(w.bytes("qzeros").size() * 2);
  require_corrupt_naming(decode_error(w), "qzeros");

  w = good;
  w.part("scales").dtype = DType::kI32;
  require_corrupt_naming(decode_error(w), "scales");

  for (std::string_view role : {"qweight", "qzeros", "scales"}) {
    w = good;
    w.drop(role);
    require_corrupt_naming(decode_error(w), role);
  }

  for (std::int32_t bad : {4, -1}) {  // 4 groups: valid entries are 0..3
    w = good;
    std::memcpy(w.part("g_idx").bytes.data() + 77 * 4, &bad, 4);
    e = decode_error(w);
    require_corrupt_naming(e, "g_idx");
    CHECK(e.message().find("77") != std::string::npos);
    CHECK(e.message().find(std::to_string(bad)) != std::string::npos);
  }

  w = good;  // GPTQ needs K a multiple of 32
  w.t.cols = 100;
  CHECK(decode_error(w).code() == Errc::kUnsupported);
  w = good;
  w.t.params.bits = 5;
  CHECK(decode_error(w).code() == Errc::kUnsupported);
}

// ---- AWQ -----------------------------------------------------------------------------------

std::vector<float> ref_awq_gemm(const Weight& w) {
  const std::uint64_t n_cols = w.t.rows;
  const std::uint64_t k_cols = w.t.cols;
  std::vector<float> out(n_cols * k_cols);
  for (std::uint64_t n = 0; n < n_cols; ++n)
    for (std::uint64_t k = 0; k < k_cols; ++k) {
      const std::uint64_t g = k / w.t.params.group_size;
      const std::uint32_t q = ref_awq_gemm_get(w.bytes("qweight"), n_cols, k, n);
      const std::uint32_t z = ref_awq_gemm_get(w.bytes("qzeros"), n_cols, g, n);
      out[n * k_cols + k] = ref_w(ref_scale(w.bytes("scales"), w.find("scales")->dtype, g * n_cols + n), q, z);
    }
  return out;
}

std::vector<float> ref_awq_gemv(const Weight& w) {
  const std::uint64_t n_cols = w.t.rows;
  const std::uint64_t k_cols = w.t.cols;
  const std::uint64_t wz = ref_gemv_zeros_width(k_cols, w.t.params.group_size);
  std::vector<float> out(n_cols * k_cols);
  for (std::uint64_t n = 0; n < n_cols; ++n)
    for (std::uint64_t k = 0; k < k_cols; ++k) {
      const std::uint64_t g = k / w.t.params.group_size;
      const std::uint32_t q = ref_get(w.bytes("qweight"), contiguous(n * ref_ceil(k_cols, 8), 4), k);
      const std::uint32_t z = ref_get(w.bytes("qzeros"), contiguous(n * wz, 4), g);
      out[n * k_cols + k] = ref_w(ref_scale(w.bytes("scales"), w.find("scales")->dtype, n * 8 * wz + g), q, z);
    }
  return out;
}

TEST_CASE("AWQ GEMM and GEMV decode like the reference for each group size", "[quant]") {
  Rng rng(0x6177710000000001);
  const std::uint64_t k = 384;
  for (std::uint64_t group : {32u, 64u, 128u, 384u}) {
    for (std::uint64_t n : {40u, 44u}) {
      INFO("GEMM group " << group << " N " << n);
      const Weight w = make_awq_gemm(k, n, group, rng);
      const std::vector<float> full = decode(w);
      require_same(full, ref_awq_gemm(w), k);
      check_row_ranges(w, full, rng);
    }
    INFO("GEMV group " << group);
    const Weight w = make_awq_gemv(k, 24, group, rng);
    const Result<PackedShapes> shapes = packed_shapes(w.t);
    REQUIRE(shapes.has_value());
    CHECK(shapes->zeros == w.find("qzeros")->shape);
    CHECK(shapes->scales == w.find("scales")->shape);
    const std::vector<float> full = decode(w);
    require_same(full, ref_awq_gemv(w), k);
    check_row_ranges(w, full, rng);
  }
  // The zeros widths formats.md implies for K = 384.
  CHECK(ref_gemv_zeros_width(384, 32) == 4);
  CHECK(ref_gemv_zeros_width(384, 64) == 2);
  CHECK(ref_gemv_zeros_width(384, 128) == 1);
  CHECK(packed_shapes(awq_tensor(QuantScheme::kAwqGemv, 384, 8, 16)).error().code() == Errc::kUnsupported);
}

// AWQ GEMV rows go through the GPTQ rows' AVX2 decoder (their words are adjacent): its BF16 and
// F16 against the F32 decode converted, with kEdgeScales spread over rows 5.. and their groups.
TEST_CASE("AWQ GEMV to BF16 and F16 equals the F32 decode converted, with scales at every edge", "[quant]") {
  Rng rng(0x617771000000000b);
  for (const bool edges : {false, true})
    for (const std::uint64_t group : {32u, 64u, 128u, 640u}) {
      INFO((edges ? "F32 edge" : "F16") << " scales, group " << group);
      Weight w = make_awq_gemv(640, 40, group, rng);
      if (edges) {
        OwnedPart& part = w.part("scales");
        Bytes f32(part.bytes.size() * 2);
        REQUIRE(convert(part.bytes, part.dtype, f32, DType::kF32).has_value());
        const std::uint64_t width = part.shape[1], groups = 640 / group;
        for (std::size_t i = 0; i < std::size(kEdgeScales); ++i)
          std::memcpy(f32.data() + ((5 + i) * width + i % groups) * 4, &kEdgeScales[i], 4);
        part.bytes = std::move(f32);
        part.dtype = DType::kF32;
      }
      const std::vector<float> f32 = decode(w);
      require_same(f32, ref_awq_gemv(w), w.t.cols);
      require_narrow_outputs_converted(w, f32);
    }
}

TEST_CASE("AWQ GEMM packs columns 0..7 to 0x75316420 and decodes them back", "[quant]") {
  const LogicalTensor t = awq_tensor(QuantScheme::kAwqGemm, 32, 8, 32);
  std::vector<std::uint8_t> q(32 * 8);
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<std::uint8_t>(i % 8);
  const std::vector<std::uint8_t> z(8, 0);
  Bytes qweight(32 * 4);
  Bytes qzeros(4);
  REQUIRE(pack_awq_gemm(t, q, z, qweight, qzeros).has_value());
  for (int r = 0; r < 32; ++r) {
    std::uint32_t word;
    std::memcpy(&word, qweight.data() + r * 4, 4);
    CHECK(word == 0x75316420u);
  }
  Weight w;
  w.t = t;
  w.add("qweight", DType::kI32, Shape{32, 1}, qweight);
  w.add("qzeros", DType::kI32, Shape{1, 1}, qzeros);
  Bytes scales(8 * 4);
  const float one = 1.0f;
  for (int i = 0; i < 8; ++i) std::memcpy(scales.data() + i * 4, &one, 4);
  w.add("scales", DType::kF32, Shape{1, 8}, scales);
  w.t.params.scale_dtype = DType::kF32;
  const std::vector<float> out = decode(w);
  for (std::uint64_t n = 0; n < 8; ++n)
    for (std::uint64_t k = 0; k < 32; ++k) CHECK(out[n * 32 + k] == static_cast<float>(n));
}

TEST_CASE("pack_awq_gemm and pack_awq_gemv write the producers' bytes", "[quant]") {
  Rng rng(0x6177710000000002);
  const std::uint64_t k = 256;
  const std::uint64_t n = 32;
  for (std::uint64_t group : {32u, 64u, 128u, 256u}) {
    INFO("group " << group);
    const Weight gemm = make_awq_gemm(k, n, group, rng);
    const std::uint64_t groups = k / group;
    std::vector<std::uint8_t> q;
    std::vector<std::uint8_t> z;
    for (std::uint64_t kk = 0; kk < k; ++kk)
      for (std::uint64_t c = 0; c < n; ++c)
        q.push_back(static_cast<std::uint8_t>(ref_awq_gemm_get(gemm.bytes("qweight"), n, kk, c)));
    for (std::uint64_t g = 0; g < groups; ++g)
      for (std::uint64_t c = 0; c < n; ++c)
        z.push_back(static_cast<std::uint8_t>(ref_awq_gemm_get(gemm.bytes("qzeros"), n, g, c)));
    Bytes qweight(gemm.bytes("qweight").size());
    Bytes qzeros(gemm.bytes("qzeros").size());
    REQUIRE(pack_awq_gemm(gemm.t, q, z, qweight, qzeros).has_value());
    CHECK(qweight == gemm.bytes("qweight"));  // N % 8 == 0: no spare bits
    CHECK(qzeros == gemm.bytes("qzeros"));

    // GEMV from the same codes and scales: natural order along K, zeros along groups, scales
    // transposed and zero-padded.
    const LogicalTensor t = awq_tensor(QuantScheme::kAwqGemv, k, n, group);
    const std::uint64_t wz = ref_gemv_zeros_width(k, group);
    Bytes vq(n * (k / 8) * 4);
    Bytes vz(n * wz * 4);
    Bytes vs(n * 8 * wz * 2);
    REQUIRE(pack_awq_gemv(t, q, z, gemm.bytes("scales"), vq, vz, vs).has_value());
    Bytes want_q(vq.size());
    Bytes want_z(vz.size());
    Bytes want_s(vs.size());
    for (std::uint64_t c = 0; c < n; ++c) {
      for (std::uint64_t kk = 0; kk < k; ++kk) ref_put(want_q, contiguous(c * (k / 8), 4), kk, q[kk * n + c]);
      for (std::uint64_t g = 0; g < groups; ++g) {
        ref_put(want_z, contiguous(c * wz, 4), g, z[g * n + c]);
        std::memcpy(want_s.data() + (c * 8 * wz + g) * 2, gemm.bytes("scales").data() + (g * n + c) * 2, 2);
      }
    }
    CHECK(vq == want_q);
    CHECK(vz == want_z);
    CHECK(vs == want_s);
    Weight gemv;
    gemv.t = t;
    gemv.add("qweight", DType::kI32, Shape{n, k / 8}, vq);
    gemv.add("qzeros", DType::kI32, Shape{n, wz}, vz);
    gemv.add("scales", DType::kF16, Shape{n, 8 * wz}, vs);
    require_same(decode(gemv), decode(gemm), k);
  }
}

}  // namespace

TEST_CASE("GPTQ row-parallel shards with whole scales and zeros decode to the weight's columns", "[quant]") {
  // What a tensor-parallel plan gives a rank of a row-parallel GPTQ weight with g_idx: half of
  // K, g_idx indexing all groups (QuantParams::groups), scales and zeros whole.
  Rng rng(0x6770747100000042);
  for (unsigned bits : {2u, 3u, 4u, 8u})
    for (bool act_order : {false, true}) {
      INFO(bits << "-bit " << (act_order ? "act-order" : "g_idx = k / G"));
      Weight whole = make_gptq({bits, 32, 1, false, true, DType::kF16}, 256, 40, rng);
      if (!act_order) {
        std::vector<std::int32_t> trivial(256);
        for (std::int32_t k = 0; k < 256; ++k) trivial[static_cast<std::size_t>(k)] = k / 32;
        whole.part("g_idx").bytes = i32_bytes(trivial);
      }
      const std::vector<float> full = decode(whole);
      const Weight shard = gptq_second_half_of_k(whole);
      const std::vector<float> half = decode(shard);
      std::vector<float> want;
      for (std::uint64_t n = 0; n < 40; ++n)
        for (std::uint64_t k = 128; k < 256; ++k) want.push_back(full[n * 256 + k]);
      require_same(half, want, 128);
    }
  // The stored group count needs a g_idx to index it.
  Weight whole = make_gptq({4, 32, 2, true, true, DType::kF16}, 256, 8, rng);
  Weight shard = gptq_second_half_of_k(whole);
  shard.drop("g_idx");
  CHECK(decode_error(shard).code() == Errc::kCorrupt);
}

TEST_CASE(
    "compressed-tensors int8 row-parallel shards with whole scales and zero points decode to the weight's columns",
    "[quant]") {
  Rng rng(0x6374000000000042);
  const CtIntShard w = ct_int_second_half_of_k(rng);
  const std::vector<float> full = decode(w.whole);
  const std::vector<float> half = decode(w.shard);
  std::vector<float> want;
  for (std::uint64_t n = 0; n < 13; ++n)
    for (std::uint64_t k = 64; k < 128; ++k) want.push_back(full[n * 128 + k]);
  require_same(half, want, 64);
}

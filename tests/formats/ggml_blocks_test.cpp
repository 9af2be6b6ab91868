// GGML block decoding (GGUF's quantized types) on the CPU: known answers worked out by hand
// from ggml-common.h's block layouts, and the K-quants against a transcription of the loops of
// ggml-quants.c's dequantize_row_q{2,3,4,5,6}_K (a different indexing from qload's per-element
// one), and OCP MXFP4 as gpt-oss stores it. python/tests/gguf checks every type against gguf-py
// itself (python/tests/clients MXFP4 against transformers); quant_device_args_test and
// tests/gpu check the device arithmetic against this decoder.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "qload/formats/convert.hpp"
#include "qload/formats/quant_codec.hpp"
#include "quant_device_cases.hpp"

using namespace qload;
using namespace qload::formats;
using namespace qload::testing::quant_ref;

namespace {

const GgmlBlockType& type_named(std::string_view name) {
  for (const GgmlBlockType& t : kGgmlBlockTypes)
    if (t.name == name) return t;
  FAIL("no type " << name);
  return kGgmlBlockTypes[0];
}

// One row of blocks through dequantize_rows, as f32.
std::vector<float> decode(std::string_view type, const Bytes& blocks) {
  const GgmlBlockType& t = type_named(type);
  REQUIRE(blocks.size() % t.bytes == 0);
  Weight w;
  w.t.name = "w";
  w.t.params.scheme = QuantScheme::kGgml;
  w.t.params.ggml_type = t.id;
  w.t.rows = 1;
  w.t.cols = blocks.size() / t.bytes * t.elems;
  w.add("blocks", DType::kU8, Shape{1, blocks.size()}, blocks);
  std::vector<float> out(w.t.cols);
  const std::vector<PartBytes> views = w.views();
  const Status st = dequantize_rows(w.t, views, 0, 1, DType::kF32, std::as_writable_bytes(std::span(out)));
  if (!st) FAIL(st.error().to_string());
  return out;
}

// A block of `size` zero bytes with `bytes` written at `at`.
struct Block {
  Bytes b;
  explicit Block(std::size_t size) : b(size, std::byte{0}) {}
  Block& at(std::size_t offset, std::initializer_list<unsigned> bytes) {
    for (const unsigned v : bytes) b[offset++] = static_cast<std::byte>(v);
    return *this;
  }
};

}  // namespace

TEST_CASE("ggml blocks: known answers per type", "[quant][gguf]") {
  SECTION("Q4_0: d * (q - 8), low nibbles first") {
    const auto y = decode("Q4_0", Block(18).at(0, {0x00, 0x38}).at(2, {0x1F}).b);  // d = 0.5
    CHECK(y[0] == 3.5f);
    CHECK(y[16] == -3.5f);
    CHECK(y[1] == -4.0f);
  }
  SECTION("Q4_1: d * q + m") {
    const auto y = decode("Q4_1", Block(20).at(0, {0x00, 0x38, 0x00, 0xBC}).at(4 + 3, {0xA2}).b);  // 0.5, -1
    CHECK(y[3] == 0.0f);
    CHECK(y[19] == 4.0f);
    CHECK(y[0] == -1.0f);
  }
  SECTION("Q5_0: the fifth bit of element i is bit i of qh") {
    const auto y = decode("Q5_0", Block(22).at(0, {0x00, 0x34}).at(2, {0x01, 0x00, 0x02, 0x00}).at(6, {0x3F}).b);
    CHECK(y[0] == 3.75f);    // (15 | 16) - 16 = 15, times 0.25
    CHECK(y[16] == -3.25f);  // 3 - 16
    CHECK(y[17] == 0.0f);    // 0 | 16
    CHECK(y[1] == -4.0f);
  }
  SECTION("Q5_1: d * q + m") {
    const auto y = decode("Q5_1", Block(24).at(0, {0x00, 0x3C, 0x00, 0x40}).at(4, {0x00, 0x00, 0x01, 0x00}).b);
    CHECK(y[16] == 18.0f);  // q = 16 (bit 16), 1 * 16 + 2
    CHECK(y[0] == 2.0f);
  }
  SECTION("Q8_0, Q8_1 (f16 d and s) and Q8_K (f32 d)") {
    CHECK(decode("Q8_0", Block(34).at(0, {0x00, 0x40}).at(2 + 5, {0xFD}).b)[5] == -6.0f);
    CHECK(decode("Q8_1", Block(36).at(0, {0x00, 0x40, 0x12, 0x34}).at(4 + 31, {0x7F}).b)[31] == 254.0f);
    CHECK(decode("Q8_K", Block(292).at(0, {0x00, 0x00, 0x00, 0x3E}).at(4 + 255, {0x80}).b)[255] == -16.0f);
  }
  SECTION("IQ4_NL: non-linear levels") {
    const auto y = decode("IQ4_NL", Block(18).at(0, {0x00, 0x3C}).at(2, {0xF0}).b);
    CHECK(y[0] == -127.0f);
    CHECK(y[16] == 113.0f);
  }
  SECTION("MXFP4: E2M1 times 2^(e - 127)") {
    const auto y = decode("MXFP4", Block(17).at(0, {128}).at(1, {0x7F}).b);
    CHECK(y[0] == -12.0f);  // -6 * 2
    CHECK(y[16] == 12.0f);
    const auto tiny = decode("MXFP4", Block(17).at(0, {0}).at(1, {0x01}).b);
    CHECK(tiny[0] == std::ldexp(1.0f, -128));  // 2^-127 halved (the levels are doubled): a subnormal
  }
  SECTION("NVFP4: E2M1 times an unsigned E4M3 scale per 16, 0x7F is zero") {
    const auto y = decode("NVFP4", Block(36).at(0, {0x38, 0x7F, 0x01}).at(4, {0x21}).at(12, {0x77}).at(20, {0x07}).b);
    CHECK(y[0] == 0.5f);                          // 0.5 * 1
    CHECK(y[8] == 1.0f);                          // 1 * 1
    CHECK(y[16] == 0.0f);                         // scale 0x7F
    CHECK(y[32] == 6.0f * std::ldexp(1.0f, -9));  // subnormal scale 2^-9 times 6
  }
  SECTION("TQ2_0: 2-bit codes minus 1, four shifts of 32 bytes") {
    const auto y = decode("TQ2_0", Block(66).at(0, {0xE4}).at(64, {0x00, 0x3C}).b);
    CHECK((y[0] == -1.0f && y[32] == 0.0f && y[64] == 1.0f && y[96] == 2.0f));
  }
  SECTION("Q4_K: 6-bit scales and mins, both packings") {
    Block b(144);
    b.at(0, {0x00, 0x3C, 0x00, 0x38});             // d = 1, dmin = 0.5
    b.at(4, {0x42}).at(8, {0x03}).at(12, {0x21});  // sc0 = 2, min0 = 3; sc4 = 1 | (1 << 4), min4 = 2
    b.at(16, {0x05}).at(16 + 64, {0x03});
    const auto y = decode("Q4_K", b.b);
    CHECK(y[0] == 8.5f);     // 2 * 5 - 0.5 * 3
    CHECK(y[128] == 50.0f);  // 17 * 3 - 0.5 * 2
    CHECK(y[32] == 0.0f);
  }
}

namespace {

float f16(const std::uint8_t* p) {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  const Bytes in = {std::byte(h & 0xFF), std::byte(h >> 8)};
  float out;
  REQUIRE(convert(in, DType::kF16, std::as_writable_bytes(std::span(&out, 1)), DType::kF32));
  return out;
}

void scale_min_k4(int j, const std::uint8_t* q, std::uint8_t& d, std::uint8_t& m) {
  if (j < 4) {
    d = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
  }
}

// ggml-quants.c's dequantize_row_*_K for one block, loop for loop.
void ref_q2_k(const std::uint8_t* x, float* y) {
  const float d = f16(x + 80), min = f16(x + 82);
  const std::uint8_t* q = x + 16;
  int is = 0;
  for (int n = 0; n < 256; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      for (int half = 0; half < 2; ++half) {
        const std::uint8_t sc = x[is++];
        const float dl = d * (sc & 0xF), ml = min * (sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<std::int8_t>((q[l + 16 * half] >> shift) & 3) - ml;
      }
      shift += 2;
    }
    q += 32;
  }
}

void ref_q3_k(const std::uint8_t* x, float* y) {
  constexpr std::uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
  const float d_all = f16(x + 108);
  const std::uint8_t* q = x + 32;
  const std::uint8_t* hm = x;
  std::uint8_t m = 1;
  std::uint32_t aux[4];
  std::memcpy(aux, x + 96, 12);
  const std::uint32_t tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
  aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
  aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
  aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
  std::int8_t scales[16];
  std::memcpy(scales, aux, 16);
  int is = 0;
  for (int n = 0; n < 256; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      for (int half = 0; half < 2; ++half) {
        const float dl = d_all * (scales[is++] - 32);
        for (int l = 16 * half; l < 16 * half + 16; ++l)
          *y++ = dl * (static_cast<std::int8_t>((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
      }
      shift += 2;
      m <<= 1;
    }
    q += 32;
  }
}

void ref_q45_k(const std::uint8_t* x, float* y, bool five) {
  const float d = f16(x), min = f16(x + 2);
  const std::uint8_t* scales = x + 4;
  const std::uint8_t* qh = x + 16;
  const std::uint8_t* ql = x + (five ? 48 : 16);
  std::uint8_t u1 = 1, u2 = 2;
  int is = 0;
  for (int j = 0; j < 256; j += 64) {
    std::uint8_t sc, m;
    scale_min_k4(is + 0, scales, sc, m);
    const float d1 = d * sc, m1 = min * m;
    scale_min_k4(is + 1, scales, sc, m);
    const float d2 = d * sc, m2 = min * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (five && (qh[l] & u1) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (five && (qh[l] & u2) ? 16 : 0)) - m2;
    ql += 32;
    is += 2;
    u1 <<= 2;
    u2 <<= 2;
  }
}

void ref_q6_k(const std::uint8_t* x, float* y) {
  const float d = f16(x + 208);
  const std::uint8_t* ql = x;
  const std::uint8_t* qh = x + 128;
  const auto* sc = reinterpret_cast<const std::int8_t*>(x + 192);
  for (int n = 0; n < 256; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const auto q1 = static_cast<std::int8_t>((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const auto q2 = static_cast<std::int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const auto q3 = static_cast<std::int8_t>((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const auto q4 = static_cast<std::int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l + 0] = d * sc[is + 0] * q1;
      y[l + 32] = d * sc[is + 2] * q2;
      y[l + 64] = d * sc[is + 4] * q3;
      y[l + 96] = d * sc[is + 6] * q4;
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

}  // namespace

TEST_CASE("ggml blocks: K-quants equal ggml's dequantize_row loops bit for bit", "[quant][gguf]") {
  Rng rng(19);
  struct Ref {
    const char* type;
    std::vector<std::size_t> f16_scales;  // made finite, so the comparison is of numbers
    void (*ref)(const std::uint8_t*, float*);
  };
  const Ref refs[] = {
      {"Q2_K", {80, 82}, ref_q2_k},
      {"Q3_K", {108}, ref_q3_k},
      {"Q4_K", {0, 2}, [](const std::uint8_t* x, float* y) { ref_q45_k(x, y, false); }},
      {"Q5_K", {0, 2}, [](const std::uint8_t* x, float* y) { ref_q45_k(x, y, true); }},
      {"Q6_K", {208}, ref_q6_k},
  };
  for (const Ref& r : refs) {
    INFO(r.type);
    const GgmlBlockType& t = type_named(r.type);
    constexpr std::size_t kBlocks = 64;
    Bytes blocks = random_bytes(kBlocks * t.bytes, rng);
    for (std::size_t b = 0; b < kBlocks; ++b)
      for (const std::size_t at : r.f16_scales) {
        const auto h = static_cast<std::uint16_t>((rng() % 0x3000) | (rng() % 2 ? 0x8000 : 0));  // |x| < 1/8
        std::memcpy(blocks.data() + b * t.bytes + at, &h, 2);
      }
    const std::vector<float> got = decode(r.type, blocks);
    std::vector<float> want(kBlocks * 256);
    for (std::size_t b = 0; b < kBlocks; ++b)
      r.ref(reinterpret_cast<const std::uint8_t*>(blocks.data()) + b * t.bytes, want.data() + b * 256);
    for (std::size_t i = 0; i < want.size(); ++i) {
      INFO("element " << i);
      REQUIRE(std::memcmp(&got[i], &want[i], 4) == 0);
    }
  }
}

TEST_CASE("ggml blocks: refusals name the tensor and the type", "[quant][gguf]") {
  Rng rng(3);
  SECTION("a type with no decoder (the IQ2/IQ3/IQ1 codebooks) is kUnsupported") {
    Weight w = ggml_weight({16, "IQ2_XXS", 256, 66}, 2, 256, rng);
    const Status st = check_quantized_parts(w.t, w.views());
    REQUIRE_FALSE(st);
    CHECK(st.error().code() == Errc::kUnsupported);
    CHECK(st.error().tensor() == "IQ2_XXS.weight");
    CHECK_THAT(st.error().message(), Catch::Contains("ggml type IQ2_XXS"));
  }
  SECTION("blocks of the wrong size are kCorrupt") {
    Weight w = ggml_weight(type_named("Q4_K"), 2, 256, rng);
    w.part("blocks").bytes.pop_back();
    const Status st = check_quantized_parts(w.t, w.views());
    REQUIRE_FALSE(st);
    CHECK(st.error().code() == Errc::kCorrupt);
    CHECK_THAT(st.error().message(), Catch::Contains("not 2 rows of 144 bytes"));
  }
  SECTION("rows that are not whole blocks are kCorrupt") {
    Weight w = ggml_weight(type_named("Q8_0"), 2, 64, rng);
    w.t.cols = 48;
    const Status st = check_quantized_parts(w.t, w.views());
    REQUIRE_FALSE(st);
    CHECK(st.error().code() == Errc::kCorrupt);
    CHECK_THAT(st.error().message(), Catch::Contains("not whole Q8_0 blocks of 32"));
  }
}

TEST_CASE("mxfp4 (OCP, gpt-oss): e2m1 pairs low nibble first, times 2^(e - 127)", "[quant]") {
  Rng rng(1);
  Weight w = mxfp4_weight(1, 32, rng);
  Bytes& blocks = w.part("blocks").bytes;
  Bytes& scales = w.part("scales").bytes;
  std::fill(blocks.begin(), blocks.end(), std::byte{0});
  blocks[0] = std::byte{0xF1};   // element 0: 0.5, element 1: -6
  blocks[1] = std::byte{0x08};   // element 2: -0 (the OCP code 0b1000), element 3: +0
  blocks[15] = std::byte{0x70};  // element 30: 0, element 31: 6
  scales[0] = std::byte{129};    // 2^2
  const std::vector<float> y = decode(w);
  CHECK(y[0] == 2.0f);
  CHECK(y[1] == -24.0f);
  CHECK(y[31] == 24.0f);
  CHECK((y[2] == 0.0f && std::signbit(y[2])));
  CHECK((y[3] == 0.0f && !std::signbit(y[3])));
  scales[0] = std::byte{0};  // 2^-127: 0.5 of it is the subnormal 2^-128
  CHECK(decode(w)[0] == std::ldexp(1.0f, -128));
}

// The hand-written AVX2 and AVX-512 decoders (quant/rows_avx2.cpp, quant/rows_avx512.cpp) against
// the portable ones (GGML: ggml_rows.hpp, value(); OCP MXFP4 and NVFP4: fp4_rows.hpp and
// convert()), bit for bit, for every GGML type they cover, MXFP4, NVFP4, and every output dtype,
// on random blocks: any bits are a valid block, so NaN, Inf and subnormal f16 scales occur, and
// the narrowing to BF16 / F16 (rounding ties, overflow to Inf, NaN payloads, subnormal results,
// which AVX-512's BF16 instruction would flush) is compared as well; only a NaN's sign may
// differ. Each instruction set this CPU lacks is reported, not compared.
// quant_device_args_test checks the F32 path (whichever runs here) against the kernel's
// per-element arithmetic; this test is what keeps the two CPU paths equal.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "qload/formats/convert.hpp"
#include "quant/decoders.hpp"
#include "quant/fp4_rows.hpp"
#include "quant/row_decoders.hpp"
#include "quant_device_cases.hpp"

using namespace qload;
using namespace qload::formats::detail;
using namespace qload::testing::quant_ref;

namespace {

struct RowIsa {
  const char* name;
  bool (*ggml_decodes)(std::uint32_t) noexcept;
  decltype(&decode_block_rows_avx2) block_rows;
  decltype(&decode_mxfp4_rows_avx2) mxfp4_rows;
  decltype(&decode_nvfp4_rows_avx2) nvfp4_rows;
};
const RowIsa kIsas[] = {
    {"AVX2", ggml_avx2_decodes, decode_block_rows_avx2, decode_mxfp4_rows_avx2, decode_nvfp4_rows_avx2},
    {"AVX-512", ggml_avx512_decodes, decode_block_rows_avx512, decode_mxfp4_rows_avx512, decode_nvfp4_rows_avx512},
};

// Bit for bit, except that a NaN's sign may differ: IEEE 754 leaves the sign of a NaN that an
// operation returns unspecified, and the portable decoder's differs with the compiler's choices
// (vectorised at -O3, NVFP4's E4M3 NaN scales times a negative code keep or flip it). Payloads,
// and so the narrowing's quiet bit and truncation, are still compared.
bool equal_but_nan_signs(const std::vector<std::byte>& got, const std::vector<std::byte>& want, DType dtype) {
  const unsigned bytes = dtype_info(dtype).bits / 8;
  const unsigned mantissa_bits = dtype == DType::kF32 ? 23 : dtype == DType::kBF16 ? 7 : 10;
  const std::uint64_t sign = std::uint64_t{1} << (8 * bytes - 1);
  const std::uint64_t mantissa = (std::uint64_t{1} << mantissa_bits) - 1;
  const std::uint64_t exponent = (sign - 1) & ~mantissa;
  const auto is_nan = [&](std::uint64_t v) { return (v & exponent) == exponent && (v & mantissa) != 0; };
  if (got.size() != want.size() || got.size() % bytes != 0) return false;
  for (std::size_t i = 0; i < got.size(); i += bytes) {
    std::uint64_t g = 0, w = 0;
    std::memcpy(&g, got.data() + i, bytes);
    std::memcpy(&w, want.data() + i, bytes);
    if (g != w && !(is_nan(g) && is_nan(w) && (g ^ w) == sign)) return false;
  }
  return true;
}

// The portable decoder's f32 rows narrowed by convert() to each output dtype against each
// instruction set's decode(isa, dtype, out), bit for bit, nothing written past the rows; with
// `must_decline`, every instruction set must leave the rows to the portable decoder.
template <typename Decode>
void compare_with_portable(const std::vector<float>& f32, Decode decode, bool must_decline = false) {
  for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    INFO(dtype_name(dtype));
    const std::size_t bytes = f32.size() * (dtype_info(dtype).bits / 8);
    std::vector<std::byte> want(bytes + 16, std::byte{0x5a});
    REQUIRE(qload::formats::convert(std::as_bytes(std::span(f32)), DType::kF32, std::span(want).first(bytes), dtype));
    for (const RowIsa& isa : kIsas) {
      INFO(isa.name);
      std::vector<std::byte> got(bytes + 16, std::byte{0x5a});
      const bool decoded = decode(isa, dtype, got.data());
      if (must_decline) {
        CHECK_FALSE(decoded);
        continue;
      }
      if (!decoded) {
        WARN("this CPU lacks " << isa.name << ": nothing compared");
        continue;
      }
      CHECK(equal_but_nan_signs(got, want, dtype));
    }
  }
}

}  // namespace

TEST_CASE("ggml AVX2 and AVX-512 decoders equal the portable ones bit for bit, every type and output",
          "[quant][ggml]") {
  for (const RowIsa& isa : kIsas) {
    INFO(isa.name);
    bool any = false;
    for (const GgmlBlockType& type : kGgmlBlockTypes) {
      if (!isa.ggml_decodes(type.id)) continue;
      any = true;
      Rng rng(type.id);
      constexpr std::uint64_t kRows = 5;
      const std::uint64_t cols = 3 * 256, row_bytes = cols / type.elems * type.bytes;
      Bytes blocks = random_bytes(kRows * row_bytes, rng);
      // Q8_K's scales are f32: subnormal ones make subnormal elements, and from 2^104 on, elements
      // at or above 2^111 (where the AVX2 decoder's split narrowing would overflow): the largest
      // scale below, the smallest at, and the largest finite, in rows 1 and 2.
      if (type.name == std::string_view("Q8_K")) {
        const std::uint32_t scales[] = {0x00012345u, 0x807fffffu, 0x00000001u, 0x737fffffu, 0xf3800000u, 0x7f7fffffu};
        for (std::size_t i = 0; i < std::size(scales); ++i)
          std::memcpy(blocks.data() + (cols / 256 + i) * type.bytes, &scales[i], 4);  // from row 1 on
      }
      // MXFP4's E8M0 exponents on either side of the last one its exact BF16 path takes (252), the
      // ones above making elements over 2^111 (levels up to 6 x 2^(e - 127)), in row 1.
      if (type.name == std::string_view("MXFP4"))
        for (std::size_t i = 0; i < 6; ++i) blocks[(cols / 32 + i) * type.bytes] = std::byte(250 + i);
      const auto* base = reinterpret_cast<const std::uint8_t*>(blocks.data());
      for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
        INFO(type.name << " to " << dtype_name(dtype));
        // Rows 1..4 of 5: a start past the first row, as a shard's rows would be.
        const std::size_t out_bytes = 4 * cols * (dtype_info(dtype).bits / 8);
        std::vector<std::byte> fast(out_bytes + 16, std::byte{0x5a}), portable(out_bytes + 16, std::byte{0x5a});
        REQUIRE(isa.block_rows(type.id, base, row_bytes, cols, 1, 5, dtype, fast.data()));
        REQUIRE(decode_block_rows_portable(type.id, base, row_bytes, cols, 1, 5, dtype, portable.data()));
        std::size_t first_difference = fast.size();
        for (std::size_t i = 0; i < fast.size() && first_difference == fast.size(); ++i)
          if (fast[i] != portable[i]) first_difference = i;
        INFO("first differing byte " << first_difference << " (element "
                                     << first_difference / (dtype_info(dtype).bits / 8) << ")");
        CHECK(first_difference == fast.size());  // nothing written past the rows either
      }
    }
    if (!any) WARN("this CPU lacks " << isa.name << ": its decoders were not compared");
    // The types the hand-written decoders are meant to cover, so that a lost overload is noticed.
    if (any)
      for (const char* name : {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
                               "Q8_K", "IQ4_NL", "IQ4_XS", "MXFP4"})
        for (const GgmlBlockType& type : kGgmlBlockTypes)
          if (type.name == std::string_view(name)) CHECK(isa.ggml_decodes(type.id));
  }
}

TEST_CASE("OCP MXFP4 AVX2 and AVX-512 decoders equal the portable one bit for bit, every output", "[quant][mxfp4]") {
  Rng rng(39);
  constexpr std::uint64_t kRows = 6, kCols = 5 * 32;
  const Bytes codes = random_bytes(kRows * kCols / 2, rng);
  Bytes exponents = random_bytes(kRows * kCols / 32, rng);
  // Row 2 (the first decoded) starts with the scales that make subnormal elements, the largest,
  // and the last and first exponents e whose 12 x 2^(e - 128) is finite and is not.
  exponents[10] = std::byte{0}, exponents[11] = std::byte{1}, exponents[12] = std::byte{255};
  exponents[13] = std::byte{252}, exponents[14] = std::byte{253};
  DequantArgs a;
  a.cols = kCols;
  a.groups = kCols / 32;
  a.codes = reinterpret_cast<const std::uint8_t*>(codes.data());
  a.scale_codes = reinterpret_cast<const std::uint8_t*>(exponents.data());
  std::vector<float> f32(4 * kCols);  // rows 2..5
  decode_fp4_rows<element::Mxfp4>(a, 32, 2, 6, f32.data());
  compare_with_portable(f32, [&](const RowIsa& isa, DType dtype, std::byte* out) {
    return isa.mxfp4_rows(a.codes, a.scale_codes, kCols, 2, 6, dtype, out);
  });
}

namespace {

// Rows [row_begin, row_end) of an NVFP4 weight through the library's portable decoder
// (dequantize_nvfp4), its parts named as compressed-tensors (divides) or ModelOpt (multiplies)
// names them.
std::vector<float> portable_nvfp4_rows(const Bytes& codes, const Bytes& scales, std::uint64_t rows, std::uint64_t cols,
                                       float global, bool multiplies, std::uint64_t row_begin, std::uint64_t row_end) {
  LogicalTensor t;
  t.name = "w.weight";
  t.params.scheme = QuantScheme::kNvfp4;
  t.rows = rows;
  t.cols = cols;
  const PartBytes parts[] = {
      {.role = multiplies ? "weight" : "weight_packed", .dtype = DType::kU8, .bytes = codes},
      {.role = "weight_scale", .dtype = DType::kF8_E4M3, .bytes = scales},
      {.role = multiplies ? "weight_scale_2" : "weight_global_scale",
       .dtype = DType::kF32,
       .bytes = std::as_bytes(std::span(&global, 1))},
  };
  std::vector<float> out((row_end - row_begin) * cols);
  REQUIRE(dequantize_nvfp4(t, parts, row_begin, row_end, out));
  return out;
}

}  // namespace

TEST_CASE("NVFP4 AVX2 and AVX-512 decoders equal the portable one bit for bit, every output and global scale",
          "[quant][nvfp4]") {
  Rng rng(41);
  // 19 groups a row: scales come 8, 8, then 3 at a time; groups in pairs, then one.
  constexpr std::uint64_t kRows = 6, kCols = 19 * 16;
  const Bytes codes = random_bytes(kRows * kCols / 2, rng);
  Bytes scales = random_bytes(kRows * kCols / 16, rng);
  // E4M3 NaN (both signs), zero, -0, the smallest subnormal, the largest finite.
  const std::uint8_t special[] = {0x7f, 0xff, 0x00, 0x80, 0x01, 0x7e};
  for (std::size_t i = 0; i < std::size(special); ++i) scales[2 * 19 + i] = std::byte{special[i]};  // row 2
  // Divided (compressed-tensors) or multiplied (ModelOpt); a tiny divisor makes scales overflow
  // to Inf (0 x Inf is NaN; E4M3's NaN codes give NaN too), a tiny product makes subnormal
  // elements, a NaN global scale makes every element NaN.
  for (const auto& [global, multiplies] :
       {std::pair{448.0f * 6.0f / 3.5f, false}, std::pair{1e-40f, false}, std::pair{0.0123f, true},
        std::pair{1e-38f, true}, std::pair{3e38f, true}, std::pair{std::numeric_limits<float>::quiet_NaN(), false},
        std::pair{std::bit_cast<float>(0xffffffffu), true}}) {
    INFO("global scale " << global << (multiplies ? " (multiplies)" : " (divides)"));
    DequantArgs a;
    a.cols = kCols;
    a.groups = kCols / 16;
    a.codes = reinterpret_cast<const std::uint8_t*>(codes.data());
    a.scale_codes = reinterpret_cast<const std::uint8_t*>(scales.data());
    a.global_scale = global;
    a.global_multiplies = multiplies;
    // The reference is the library's portable decoder as the library compiles it, not the
    // template instantiated here: which sign a NaN computed from NaN operands takes (E4M3's NaN
    // codes, 0 x Inf) is the compiler's choice, and this file's flags follow the build type.
    const std::vector<float> f32 = portable_nvfp4_rows(codes, scales, kRows, kCols, global, multiplies, 2, 6);
    // A NaN global scale is left to the portable decoder (its NaN is the compiler's choice).
    compare_with_portable(
        f32, [&](const RowIsa& isa, DType dtype, std::byte* out) { return isa.nvfp4_rows(a, 2, 6, dtype, out); },
        std::isnan(global));
  }
}

// The AVX2 decoders' BF16 narrowing for blocks whose elements are zeros or normal and below 2^111
// (Veltkamp's split, rows_avx2.cpp) against convert()'s: every mantissa of both signs of the
// exponents at the range's edges and across it (the split's rounding is the same at every
// exponent between, where it was checked once over every value), and both zeros.
TEST_CASE("the AVX2 split narrowing to BF16 rounds as convert() does over its whole range", "[quant][ggml]") {
  std::vector<float> in;
  std::vector<std::uint16_t> got, want;
  for (const std::uint32_t exponent : {1u, 2u, 64u, 126u, 127u, 128u, 200u, 236u, 237u}) {
    INFO("exponent field " << exponent);
    in.resize(std::size_t{1} << 24);
    for (std::uint32_t m = 0; m < (1u << 23); ++m) {
      in[2 * m] = std::bit_cast<float>(exponent << 23 | m);
      in[2 * m + 1] = std::bit_cast<float>(0x80000000u | exponent << 23 | m);
    }
    if (exponent == 1) in[0] = 0.0f, in[1] = -0.0f;
    got.assign(in.size(), 0x5a5a);
    if (!narrow_bf16_split_avx2(in.data(), in.size(), got.data())) {
      WARN("this CPU lacks AVX2: nothing compared");
      return;
    }
    want.assign(in.size(), 0);
    REQUIRE(qload::formats::convert(std::as_bytes(std::span(in)), DType::kF32, std::as_writable_bytes(std::span(want)),
                                    DType::kBF16));
    std::size_t differ = 0;
    for (std::size_t i = 0; i < in.size(); ++i) differ += got[i] != want[i];
    CHECK(differ == 0);
  }
}

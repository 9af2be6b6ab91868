// Integer quantized schemes (GPTQ v1/v2, AWQ GEMM/GEMV, compressed-tensors pack-quantized and
// int-quantized): decoders (quant_codec.hpp dequantize_rows) and encoders / repackers
// (quant_pack.hpp).
//
// Reference: a second, deliberately naive implementation in this file that shares nothing with
// the decoders' word/shift logic. It reads (and writes) every value bit by bit from the
// definition in ../shared/formats.md: value i of a b-bit LSB-first bitstream is bits
// [i*b, i*b + b) of the stream, bit p of the stream is bit p % 8 of byte (p % 32) / 8 of the
// stream's word p / 32 (words little-endian), and each scheme only says which stored word is the
// stream's word j (GPTQ qweight column n: word j*N + n; compressed-tensors zero points column g:
// word j*groups + g; ...). AWQ GEMM nibbles are found by searching the documented pack order
// [0,2,4,6,1,3,5,7]. f16 scales are decoded by GCC's _Float16 (libgcc soft-fp), bf16 by a 16-bit
// shift. The expected weight is float(scale) * float(q - z) with q - z an int, as documented.
// Random data come from fixed seeds; known answers come from formats.md.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "qload/formats/quant.hpp"
#include "qload/formats/quant_codec.hpp"
#include "qload/formats/quant_pack.hpp"
#include "qload/runtime/dtype.hpp"
#include "qload/runtime/error.hpp"

using namespace qload;
using namespace qload::formats;

namespace {

using Bytes = std::vector<std::byte>;
using Rng = std::mt19937_64;

constexpr std::string_view kName = "model.layers.0.mlp.down_proj.weight";

// ---- the reference -------------------------------------------------------------------------

// A bitstream inside a part: which stored 32-bit word is the stream's word j, and whether
// values are dense (value i at bit i*b) or padded (32/b values per word, high bits unused).
struct RefStream {
  std::function<std::uint64_t(std::uint64_t)> word;
  unsigned bits = 4;
  bool padded = false;

  std::uint64_t bit_of(std::uint64_t i, unsigned t) const {
    if (!padded) return i * bits + t;
    const std::uint64_t per_word = 32 / bits;
    return i / per_word * 32 + i % per_word * bits + t;
  }
  std::uint64_t byte_of(std::uint64_t p) const { return word(p / 32) * 4 + p % 32 / 8; }
};

std::uint32_t ref_get(const Bytes& part, const RefStream& s, std::uint64_t i) {
  std::uint32_t v = 0;
  for (unsigned t = 0; t < s.bits; ++t) {
    const std::uint64_t p = s.bit_of(i, t);
    const unsigned bit = (std::to_integer<unsigned>(part.at(s.byte_of(p))) >> (p % 8)) & 1u;
    v |= bit << t;
  }
  return v;
}

void ref_put(Bytes& part, const RefStream& s, std::uint64_t i, std::uint32_t v) {
  for (unsigned t = 0; t < s.bits; ++t) {
    const std::uint64_t p = s.bit_of(i, t);
    const auto bit = static_cast<std::byte>(((v >> t) & 1u) << (p % 8));
    part.at(s.byte_of(p)) |= bit;
  }
}

RefStream contiguous(std::uint64_t first_word, unsigned bits, bool padded = false) {
  return {[first_word](std::uint64_t j) { return first_word + j; }, bits, padded};
}
RefStream strided(std::uint64_t first_word, std::uint64_t stride, unsigned bits, bool padded = false) {
  return {[first_word, stride](std::uint64_t j) { return first_word + j * stride; }, bits, padded};
}

std::uint64_t ref_ceil(std::uint64_t a, std::uint64_t b) {
  return (a + b - 1) / b;
}

std::int64_t ref_int(const Bytes& part, DType dtype, std::uint64_t i) {
  switch (dtype) {
    case DType::kI8: return static_cast<std::int8_t>(part.at(i));
    case DType::kI32: {
      std::int32_t v;
      std::memcpy(&v, part.data() + i * 4, 4);
      return v;
    }
    default: {
      std::int64_t v;
      std::memcpy(&v, part.data() + i * 8, 8);
      return v;
    }
  }
}

float ref_scale(const Bytes& part, DType dtype, std::uint64_t i) {
  if (dtype == DType::kF32) {
    float v;
    std::memcpy(&v, part.data() + i * 4, 4);
    return v;
  }
  std::uint16_t h;
  std::memcpy(&h, part.data() + i * 2, 2);
  if (dtype == DType::kBF16) return std::bit_cast<float>(std::uint32_t{h} << 16);
  return static_cast<float>(std::bit_cast<_Float16>(h));
}

float ref_w(float scale, std::int64_t q, std::int64_t z) {
  return scale * static_cast<float>(q - z);
}

// ---- fixtures ------------------------------------------------------------------------------

struct OwnedPart {
  std::string role;
  DType dtype;
  Shape shape;
  Bytes bytes;
};

struct Weight {
  LogicalTensor t;
  std::vector<OwnedPart> parts;

  std::vector<PartBytes> views() const {
    std::vector<PartBytes> v;
    for (const OwnedPart& p : parts) v.push_back({p.role, p.dtype, p.shape, p.bytes});
    return v;
  }
  const OwnedPart* find(std::string_view role) const {
    for (const OwnedPart& p : parts)
      if (p.role == role) return &p;
    return nullptr;
  }
  OwnedPart& part(std::string_view role) {
    for (OwnedPart& p : parts)
      if (p.role == role) return p;
    FAIL("no part " << role);
    return parts.front();
  }
  const Bytes& bytes(std::string_view role) const { return const_cast<Weight*>(this)->part(role).bytes; }
  void add(std::string role, DType dtype, Shape shape, Bytes bytes) {
    parts.push_back({std::move(role), dtype, std::move(shape), std::move(bytes)});
  }
  void drop(std::string_view role) {
    std::erase_if(parts, [role](const OwnedPart& p) { return p.role == role; });
  }
};

Bytes random_bytes(std::size_t n, Rng& rng) {
  Bytes b(n);
  for (std::byte& x : b) x = static_cast<std::byte>(rng() & 0xFF);
  return b;
}

// Scales: magnitudes in [2^-12, 2^-2), random signs, as F16 / BF16 / F32 elements.
Bytes random_scales(std::uint64_t count, DType dtype, Rng& rng) {
  std::uniform_real_distribution<float> mag(0.000244f, 0.25f);
  const std::uint64_t elem = dtype == DType::kF32 ? 4 : 2;
  Bytes out(count * elem);
  for (std::uint64_t i = 0; i < count; ++i) {
    const float v = (rng() & 1) ? -mag(rng) : mag(rng);
    if (dtype == DType::kF32) {
      std::memcpy(out.data() + i * 4, &v, 4);
    } else {
      const std::uint16_t h = dtype == DType::kBF16 ? static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(v) >> 16)
                                                    : std::bit_cast<std::uint16_t>(static_cast<_Float16>(v));
      std::memcpy(out.data() + i * 2, &h, 2);
    }
  }
  return out;
}

Bytes i32_bytes(const std::vector<std::int32_t>& v) {
  Bytes b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Act-order g_idx: input columns are quantized in a random order; consecutive runs of G in that
// order form the groups (formats.md section 1).
std::vector<std::int32_t> act_order_g_idx(std::uint64_t k, std::uint64_t group, Rng& rng) {
  std::vector<std::int32_t> perm(k);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<std::int32_t> g_idx(k);
  for (std::uint64_t i = 0; i < k; ++i) g_idx[static_cast<std::size_t>(perm[i])] = static_cast<std::int32_t>(i / group);
  return g_idx;
}

std::vector<float> decode(const Weight& w, std::uint64_t row_begin, std::uint64_t row_end) {
  std::vector<float> out((row_end - row_begin) * w.t.cols);
  const std::vector<PartBytes> views = w.views();
  const Status st =
      dequantize_rows(w.t, views, row_begin, row_end, DType::kF32, std::as_writable_bytes(std::span(out)));
  if (!st) FAIL(st.error().to_string());
  return out;
}
std::vector<float> decode(const Weight& w) {
  return decode(w, 0, w.t.rows);
}

Error decode_error(const Weight& w) {
  std::vector<float> out(w.t.rows * w.t.cols);
  const std::vector<PartBytes> views = w.views();
  const Status st = dequantize_rows(w.t, views, 0, w.t.rows, DType::kF32, std::as_writable_bytes(std::span(out)));
  REQUIRE_FALSE(st.has_value());
  return st.error();
}

// Bitwise equality; reports the first difference.
void require_same(const std::vector<float>& got, const std::vector<float>& want, std::uint64_t cols) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(want[i])) {
      INFO("first difference at row " << i / cols << ", column " << i % cols << ": got " << got[i] << ", want "
                                      << want[i]);
      REQUIRE(false);
    }
}

// Row ranges decode to the matching slice of the whole weight.
void check_row_ranges(const Weight& w, const std::vector<float>& full, Rng& rng) {
  const std::uint64_t n = w.t.rows;
  const std::uint64_t k = w.t.cols;
  for (int trial = 0; trial < 4; ++trial) {
    std::uint64_t a = rng() % (n + 1);
    std::uint64_t b = rng() % (n + 1);
    if (a > b) std::swap(a, b);
    const std::vector<float> part = decode(w, a, b);
    const std::vector<float> slice(full.begin() + static_cast<std::ptrdiff_t>(a * k),
                                   full.begin() + static_cast<std::ptrdiff_t>(b * k));
    INFO("rows [" << a << ", " << b << ")");
    require_same(part, slice, k);
  }
}

void require_corrupt_naming(const Error& e, std::string_view part_role) {
  INFO(e.to_string());
  CHECK(e.code() == Errc::kCorrupt);
  CHECK(e.tensor() == std::optional<std::string_view>(kName));
  CHECK(e.message().find(part_role) != std::string::npos);
}

std::uint64_t group_of(std::uint64_t k, std::uint64_t g) {
  return g == 0 ? k : g;
}

// ---- GPTQ ----------------------------------------------------------------------------------

struct GptqCase {
  unsigned bits = 4;
  std::uint64_t group = 128;  // 0: -1 (one group of K)
  unsigned version = 2;
  bool sym = true;
  bool act_order = false;
  DType scale_dtype = DType::kF16;
};

RefStream gptq_q_stream(std::uint64_t n_cols, std::uint64_t n, unsigned bits) {
  return strided(n, n_cols, bits);
}
RefStream gptq_z_stream(std::uint64_t n_cols, std::uint64_t g, unsigned bits) {
  return contiguous(g * ref_ceil(n_cols * bits, 32), bits);
}

// Random qweight words; random qzeros words (asymmetric) or the symmetric zero 2^(b-1) written
// as the version stores it; random scales; optional act-order g_idx.
Weight make_gptq(const GptqCase& c, std::uint64_t k, std::uint64_t n, Rng& rng) {
  Weight w;
  w.t.name = kName;
  w.t.rows = n;
  w.t.cols = k;
  const std::uint64_t group = group_of(k, c.group);
  w.t.params = {.scheme = QuantScheme::kGptq,
                .bits = c.bits,
                .group_size = group,
                .sym = c.sym,
                .gptq_version = c.version,
                .scale_dtype = c.scale_dtype};
  const std::uint64_t groups = ref_ceil(k, group);
  const std::uint64_t zw = ref_ceil(n * c.bits, 32);
  w.add("qweight", DType::kI32, Shape{k / 32 * c.bits, n}, random_bytes(k / 32 * c.bits * n * 4, rng));
  Bytes qzeros = random_bytes(groups * zw * 4, rng);
  if (c.sym) {
    std::fill(qzeros.begin(), qzeros.end(), std::byte{0});
    const std::uint32_t z = 1u << (c.bits - 1);
    const std::uint32_t stored = c.version == 1 ? (z - 1) & ((1u << c.bits) - 1) : z;
    for (std::uint64_t g = 0; g < groups; ++g)
      for (std::uint64_t col = 0; col < n; ++col) ref_put(qzeros, gptq_z_stream(n, g, c.bits), col, stored);
  }
  w.add("qzeros", DType::kI32, Shape{groups, zw}, std::move(qzeros));
  w.add("scales", c.scale_dtype, Shape{groups, n}, random_scales(groups * n, c.scale_dtype, rng));
  if (c.act_order) w.add("g_idx", DType::kI32, Shape{k}, i32_bytes(act_order_g_idx(k, group, rng)));
  return w;
}

// The true zero point the reference reads for (group g, column n).
std::int64_t ref_gptq_zero(const Weight& w, std::uint64_t g, std::uint64_t n) {
  const unsigned b = w.t.params.bits;
  const std::uint32_t stored = ref_get(w.bytes("qzeros"), gptq_z_stream(w.t.rows, g, b), n);
  return w.t.params.gptq_version == 1 ? (stored + 1) % (1u << b) : stored;
}

std::uint64_t ref_group(const Weight& w, std::string_view g_idx_role, std::uint64_t k) {
  const OwnedPart* g_idx = w.find(g_idx_role);
  if (g_idx != nullptr) return static_cast<std::uint64_t>(ref_int(g_idx->bytes, g_idx->dtype, k));
  return k / group_of(w.t.cols, w.t.params.group_size);
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

constexpr unsigned kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // nibble i holds column 8c + order[i]

// Reads AWQ GEMM value (row, column n) of a [rows, ceil(N/8)] part by finding n's nibble.
std::uint32_t ref_awq_gemm_get(const Bytes& part, std::uint64_t n_cols, std::uint64_t row, std::uint64_t n) {
  unsigned nibble = 0;
  while (kAwqOrder[nibble] != n % 8) ++nibble;
  return ref_get(part, contiguous(row * ref_ceil(n_cols, 8) + n / 8, 4), nibble);
}
LogicalTensor awq_tensor(QuantScheme scheme, std::uint64_t k, std::uint64_t n, std::uint64_t group) {
  LogicalTensor t;
  t.name = kName;
  t.rows = n;
  t.cols = k;
  t.params = {.scheme = scheme, .bits = 4, .group_size = group, .sym = false};
  return t;
}

Weight make_awq_gemm(std::uint64_t k, std::uint64_t n, std::uint64_t group, Rng& rng) {
  Weight w;
  w.t = awq_tensor(QuantScheme::kAwqGemm, k, n, group);
  const std::uint64_t groups = ref_ceil(k, group);
  w.add("qweight", DType::kI32, Shape{k, ref_ceil(n, 8)}, random_bytes(k * ref_ceil(n, 8) * 4, rng));
  w.add("qzeros", DType::kI32, Shape{groups, ref_ceil(n, 8)}, random_bytes(groups * ref_ceil(n, 8) * 4, rng));
  w.add("scales", DType::kF16, Shape{groups, n}, random_scales(groups * n, DType::kF16, rng));
  return w;
}

std::vector<float> ref_awq_gemm(const Weight& w) {
  const std::uint64_t n_cols = w.t.rows;
  const std::uint64_t k_cols = w.t.cols;
  std::vector<float> out(n_cols * k_cols);
  for (std::uint64_t n = 0; n < n_cols; ++n)
    for (std::uint64_t k = 0; k < k_cols; ++k) {
      const std::uint64_t g = k / w.t.params.group_size;
      const std::uint32_t q = ref_awq_gemm_get(w.bytes("qweight"), n_cols, k, n);
      const std::uint32_t z = ref_awq_gemm_get(w.bytes("qzeros"), n_cols, g, n);
      out[n * k_cols + k] = ref_w(ref_scale(w.bytes("scales"), DType::kF16, g * n_cols + n), q, z);
    }
  return out;
}

// AutoAWQ's zeros width for GEMV, from formats.md: ceil(groups / 8) rounded up to a multiple of
// 1 / 2 / 4 for G >= 128 / 64 / 32.
std::uint64_t ref_gemv_zeros_width(std::uint64_t k, std::uint64_t group) {
  const std::uint64_t m = group >= 128 ? 1 : group == 64 ? 2 : 4;
  return ref_ceil(ref_ceil(k / group, 8), m) * m;
}

Weight make_awq_gemv(std::uint64_t k, std::uint64_t n, std::uint64_t group, Rng& rng) {
  Weight w;
  w.t = awq_tensor(QuantScheme::kAwqGemv, k, n, group);
  const std::uint64_t wz = ref_gemv_zeros_width(k, group);
  w.add("qweight", DType::kI32, Shape{n, ref_ceil(k, 8)}, random_bytes(n * ref_ceil(k, 8) * 4, rng));
  w.add("qzeros", DType::kI32, Shape{n, wz}, random_bytes(n * wz * 4, rng));
  w.add("scales", DType::kF16, Shape{n, 8 * wz}, random_scales(n * 8 * wz, DType::kF16, rng));
  return w;
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
      out[n * k_cols + k] = ref_w(ref_scale(w.bytes("scales"), DType::kF16, n * 8 * wz + g), q, z);
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

// ---- compressed-tensors --------------------------------------------------------------------

struct CtCase {
  unsigned bits = 4;
  bool dense = true;
  bool sym = true;
  bool g_idx = false;
  ScaleLayout layout = ScaleLayout::kGroup;
  std::uint64_t group = 32;
};

std::string describe(const CtCase& c) {
  return fmt::format("bits {} {} {} {} layout {} group {}", c.bits, c.dense ? "dense" : "padded",
                     c.sym ? "sym" : "asym", c.g_idx ? "g_idx" : "no g_idx", static_cast<int>(c.layout), c.group);
}

std::uint64_t ct_groups(const CtCase& c, std::uint64_t k) {
  return c.layout == ScaleLayout::kGroup ? ref_ceil(k, c.group) : 1;
}
std::uint64_t ct_words(std::uint64_t count, unsigned bits, bool dense) {
  return dense ? ref_ceil(count * bits, 32) : ref_ceil(count, 32 / bits);
}
RefStream ct_row_stream(std::uint64_t k, std::uint64_t n, unsigned bits, bool dense) {
  return contiguous(n * ct_words(k, bits, dense), bits, !dense);
}
RefStream ct_zero_stream(std::uint64_t groups, std::uint64_t g, unsigned bits, bool dense) {
  return strided(g, groups, bits, !dense);
}

Weight make_ct_packed(const CtCase& c, std::uint64_t k, std::uint64_t n, Rng& rng) {
  Weight w;
  w.t.name = kName;
  w.t.rows = n;
  w.t.cols = k;
  w.t.params = {.scheme = QuantScheme::kCtPacked,
                .bits = c.bits,
                .group_size = c.layout == ScaleLayout::kGroup ? c.group : 0,
                .sym = c.sym,
                .scale_layout = c.layout,
                .scale_dtype = DType::kBF16,
                .dense_bitstream = c.dense};
  const std::uint64_t groups = ct_groups(c, k);
  const std::uint64_t wpr = ct_words(k, c.bits, c.dense);
  w.add("weight_packed", DType::kI32, Shape{n, wpr}, random_bytes(n * wpr * 4, rng));
  const Shape scale_shape = c.layout == ScaleLayout::kGroup ? Shape{n, groups} : Shape{n, 1};
  w.add("weight_scale", DType::kBF16, scale_shape, random_scales(n * groups, DType::kBF16, rng));
  if (!c.sym) {
    const std::uint64_t zr = ct_words(n, c.bits, c.dense);
    w.add("weight_zero_point", DType::kI32, Shape{zr, groups}, random_bytes(zr * groups * 4, rng));
  }
  const std::int64_t shape[2] = {static_cast<std::int64_t>(n), static_cast<std::int64_t>(k)};
  Bytes shape_bytes(16);
  std::memcpy(shape_bytes.data(), shape, 16);
  w.add("weight_shape", DType::kI64, Shape{2}, shape_bytes);
  if (c.g_idx) w.add("weight_g_idx", DType::kI32, Shape{k}, i32_bytes(act_order_g_idx(k, c.group, rng)));
  return w;
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

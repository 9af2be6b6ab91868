// Independent bit-by-bit reference for the integer quantized schemes (GPTQ, AWQ,
// compressed-tensors), and the fixtures the quant_int / quant_ct_repack tests share.
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
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qload/formats/quant.hpp"
#include "qload/formats/quant_codec.hpp"
#include "qload/runtime/dtype.hpp"
#include "qload/runtime/error.hpp"

namespace qload::testing::quant_ref {

using formats::dequantize_rows;
using formats::LogicalTensor;
using formats::PartBytes;
using formats::QuantScheme;
using formats::ScaleLayout;

using Bytes = std::vector<std::byte>;
using Rng = std::mt19937_64;

inline constexpr std::string_view kName = "model.layers.0.mlp.down_proj.weight";

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

inline std::uint32_t ref_get(const Bytes& part, const RefStream& s, std::uint64_t i) {
  std::uint32_t v = 0;
  for (unsigned t = 0; t < s.bits; ++t) {
    const std::uint64_t p = s.bit_of(i, t);
    const unsigned bit = (std::to_integer<unsigned>(part.at(s.byte_of(p))) >> (p % 8)) & 1u;
    v |= bit << t;
  }
  return v;
}

inline void ref_put(Bytes& part, const RefStream& s, std::uint64_t i, std::uint32_t v) {
  for (unsigned t = 0; t < s.bits; ++t) {
    const std::uint64_t p = s.bit_of(i, t);
    const auto bit = static_cast<std::byte>(((v >> t) & 1u) << (p % 8));
    part.at(s.byte_of(p)) |= bit;
  }
}

inline RefStream contiguous(std::uint64_t first_word, unsigned bits, bool padded = false) {
  return {[first_word](std::uint64_t j) { return first_word + j; }, bits, padded};
}
inline RefStream strided(std::uint64_t first_word, std::uint64_t stride, unsigned bits, bool padded = false) {
  return {[first_word, stride](std::uint64_t j) { return first_word + j * stride; }, bits, padded};
}

inline std::uint64_t ref_ceil(std::uint64_t a, std::uint64_t b) {
  return (a + b - 1) / b;
}

inline std::int64_t ref_int(const Bytes& part, DType dtype, std::uint64_t i) {
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

inline float ref_scale(const Bytes& part, DType dtype, std::uint64_t i) {
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

inline float ref_w(float scale, std::int64_t q, std::int64_t z) {
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

inline Bytes random_bytes(std::size_t n, Rng& rng) {
  Bytes b(n);
  for (std::byte& x : b) x = static_cast<std::byte>(rng() & 0xFF);
  return b;
}

// Scales: magnitudes in [2^-12, 2^-2), random signs, as F16 / BF16 / F32 elements.
inline Bytes random_scales(std::uint64_t count, DType dtype, Rng& rng) {
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

inline Bytes i32_bytes(const std::vector<std::int32_t>& v) {
  Bytes b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Act-order g_idx: input columns are quantized in a random order; consecutive runs of G in that
// order form the groups (formats.md section 1).
inline std::vector<std::int32_t> act_order_g_idx(std::uint64_t k, std::uint64_t group, Rng& rng) {
  std::vector<std::int32_t> perm(k);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<std::int32_t> g_idx(k);
  for (std::uint64_t i = 0; i < k; ++i) g_idx[static_cast<std::size_t>(perm[i])] = static_cast<std::int32_t>(i / group);
  return g_idx;
}

inline std::vector<float> decode(const Weight& w, std::uint64_t row_begin, std::uint64_t row_end) {
  std::vector<float> out((row_end - row_begin) * w.t.cols);
  const std::vector<PartBytes> views = w.views();
  const Status st =
      dequantize_rows(w.t, views, row_begin, row_end, DType::kF32, std::as_writable_bytes(std::span(out)));
  if (!st) FAIL(st.error().to_string());
  return out;
}
inline std::vector<float> decode(const Weight& w) {
  return decode(w, 0, w.t.rows);
}

inline Error decode_error(const Weight& w) {
  std::vector<float> out(w.t.rows * w.t.cols);
  const std::vector<PartBytes> views = w.views();
  const Status st = dequantize_rows(w.t, views, 0, w.t.rows, DType::kF32, std::as_writable_bytes(std::span(out)));
  REQUIRE_FALSE(st.has_value());
  return st.error();
}

// Bitwise equality; reports the first difference.
inline void require_same(const std::vector<float>& got, const std::vector<float>& want, std::uint64_t cols) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(want[i])) {
      INFO("first difference at row " << i / cols << ", column " << i % cols << ": got " << got[i] << ", want "
                                      << want[i]);
      REQUIRE(false);
    }
}

// Row ranges decode to the matching slice of the whole weight.
inline void check_row_ranges(const Weight& w, const std::vector<float>& full, Rng& rng) {
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

inline void require_corrupt_naming(const Error& e, std::string_view part_role) {
  INFO(e.to_string());
  CHECK(e.code() == Errc::kCorrupt);
  CHECK(e.tensor() == std::optional<std::string_view>(kName));
  CHECK(e.message().find(part_role) != std::string::npos);
}

inline std::uint64_t group_of(std::uint64_t k, std::uint64_t g) {
  return g == 0 ? k : g;
}

// ---- GPTQ and AWQ fixtures (also used by the repacking tests) --------------------------------

struct GptqCase {
  unsigned bits = 4;
  std::uint64_t group = 128;  // 0: -1 (one group of K)
  unsigned version = 2;
  bool sym = true;
  bool act_order = false;
  DType scale_dtype = DType::kF16;
};

inline RefStream gptq_z_stream(std::uint64_t n_cols, std::uint64_t g, unsigned bits) {
  return contiguous(g * ref_ceil(n_cols * bits, 32), bits);
}

// Random qweight words; random qzeros words (asymmetric) or the symmetric zero 2^(b-1) written
// as the version stores it; random scales; optional act-order g_idx.
inline Weight make_gptq(const GptqCase& c, std::uint64_t k, std::uint64_t n, Rng& rng) {
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

inline std::uint64_t ref_group(const Weight& w, std::string_view g_idx_role, std::uint64_t k) {
  const OwnedPart* g_idx = w.find(g_idx_role);
  if (g_idx != nullptr) return static_cast<std::uint64_t>(ref_int(g_idx->bytes, g_idx->dtype, k));
  return k / group_of(w.t.cols, w.t.params.group_size);
}

inline constexpr unsigned kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // nibble i holds column 8c + order[i]

// Reads AWQ GEMM value (row, column n) of a [rows, ceil(N/8)] part by finding n's nibble.
inline std::uint32_t ref_awq_gemm_get(const Bytes& part, std::uint64_t n_cols, std::uint64_t row, std::uint64_t n) {
  unsigned nibble = 0;
  while (kAwqOrder[nibble] != n % 8) ++nibble;
  return ref_get(part, contiguous(row * ref_ceil(n_cols, 8) + n / 8, 4), nibble);
}
inline LogicalTensor awq_tensor(QuantScheme scheme, std::uint64_t k, std::uint64_t n, std::uint64_t group) {
  LogicalTensor t;
  t.name = kName;
  t.rows = n;
  t.cols = k;
  t.params = {.scheme = scheme, .bits = 4, .group_size = group, .sym = false};
  return t;
}

inline Weight make_awq_gemm(std::uint64_t k, std::uint64_t n, std::uint64_t group, Rng& rng) {
  Weight w;
  w.t = awq_tensor(QuantScheme::kAwqGemm, k, n, group);
  const std::uint64_t groups = ref_ceil(k, group);
  w.add("qweight", DType::kI32, Shape{k, ref_ceil(n, 8)}, random_bytes(k * ref_ceil(n, 8) * 4, rng));
  w.add("qzeros", DType::kI32, Shape{groups, ref_ceil(n, 8)}, random_bytes(groups * ref_ceil(n, 8) * 4, rng));
  w.add("scales", DType::kF16, Shape{groups, n}, random_scales(groups * n, DType::kF16, rng));
  return w;
}

// AutoAWQ's zeros width for GEMV, from formats.md: ceil(groups / 8) rounded up to a multiple of
// 1 / 2 / 4 for G >= 128 / 64 / 32.
inline std::uint64_t ref_gemv_zeros_width(std::uint64_t k, std::uint64_t group) {
  const std::uint64_t m = group >= 128 ? 1 : group == 64 ? 2 : 4;
  return ref_ceil(ref_ceil(k / group, 8), m) * m;
}

inline Weight make_awq_gemv(std::uint64_t k, std::uint64_t n, std::uint64_t group, Rng& rng) {
  Weight w;
  w.t = awq_tensor(QuantScheme::kAwqGemv, k, n, group);
  const std::uint64_t wz = ref_gemv_zeros_width(k, group);
  w.add("qweight", DType::kI32, Shape{n, ref_ceil(k, 8)}, random_bytes(n * ref_ceil(k, 8) * 4, rng));
  w.add("qzeros", DType::kI32, Shape{n, wz}, random_bytes(n * wz * 4, rng));
  w.add("scales", DType::kF16, Shape{n, 8 * wz}, random_scales(n * 8 * wz, DType::kF16, rng));
  return w;
}

// ---- compressed-tensors pack-quantized fixtures ---------------------------------------------

struct CtCase {
  unsigned bits = 4;
  bool dense = true;
  bool sym = true;
  bool g_idx = false;
  ScaleLayout layout = ScaleLayout::kGroup;
  std::uint64_t group = 32;
};

inline std::uint64_t ct_groups(const CtCase& c, std::uint64_t k) {
  return c.layout == ScaleLayout::kGroup ? ref_ceil(k, c.group) : 1;
}
inline std::uint64_t ct_words(std::uint64_t count, unsigned bits, bool dense) {
  return dense ? ref_ceil(count * bits, 32) : ref_ceil(count, 32 / bits);
}
inline Weight make_ct_packed(const CtCase& c, std::uint64_t k, std::uint64_t n, Rng& rng) {
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

}  // namespace qload::testing::quant_ref

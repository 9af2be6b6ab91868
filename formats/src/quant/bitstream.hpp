// Shared pieces of the integer decoders and encoders (GPTQ, AWQ, compressed-tensors): reading
// and writing fields of LSB-first bitstreams of 32-bit little-endian words, checking parts
// against the shapes quant_pack.hpp's packed_shapes() gives, the group of every column of K,
// and the one dequantization kernel all integer schemes share:
//   out[k] = scale[g(k)] * float(q[k] - zero[g(k)])
// with q - zero an exact int32 and one f32 multiply (so a GPU kernel can match it bit for bit).
//
// Bitstream convention (../shared/formats.md section 0): value i of width b occupies bits
// [i*b, i*b + b) of the concatenation word0 (bits 0-31), word1 (bits 32-63), ...; a value may
// straddle two words. Words are read with memcpy, so parts need no particular alignment.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "decoders.hpp"
#include "qload/formats/quant_pack.hpp"

namespace qload::formats::detail {

static_assert(std::endian::native == std::endian::little, "packed words are read as host-order integers");

constexpr std::uint32_t field_mask(unsigned bits) noexcept {
  return bits >= 32 ? ~std::uint32_t{0} : (std::uint32_t{1} << bits) - 1;
}
constexpr std::uint64_t ceil_div_u64(std::uint64_t a, std::uint64_t b) noexcept {
  return a / b + (a % b != 0);
}
// Words holding `count` fields of `bits` bits as a dense bitstream: ceil(count * bits / 32),
// without overflowing for any count.
constexpr std::uint64_t stream_words(std::uint64_t count, unsigned bits) noexcept {
  return count / 32 * bits + ceil_div_u64(count % 32 * bits, 32);
}

inline std::uint32_t load_word(const std::byte* words, std::uint64_t index) noexcept {
  std::uint32_t w;
  std::memcpy(&w, words + index * 4, 4);
  return w;
}
inline void store_word(std::byte* words, std::uint64_t index, std::uint32_t w) noexcept {
  std::memcpy(words + index * 4, &w, 4);
}

// Field `index` of a bitstream whose consecutive words lie `stride` words apart (1: contiguous;
// N for a GPTQ qweight column; groups for a compressed-tensors zero-point column).
inline std::uint32_t get_field(const std::byte* words, std::uint64_t stride, std::uint64_t index,
                               unsigned bits) noexcept {
  const std::uint64_t pos = index * bits;
  const std::uint64_t word = pos / 32;
  const unsigned shift = static_cast<unsigned>(pos % 32);
  std::uint32_t v = load_word(words, word * stride) >> shift;
  if (shift + bits > 32) v |= load_word(words, (word + 1) * stride) << (32 - shift);
  return v & field_mask(bits);
}
// ORs `value` (< 2^bits) into field `index`; the words must start zeroed.
inline void or_field(std::byte* words, std::uint64_t stride, std::uint64_t index, unsigned bits,
                     std::uint32_t value) noexcept {
  const std::uint64_t pos = index * bits;
  const std::uint64_t word = pos / 32;
  const unsigned shift = static_cast<unsigned>(pos % 32);
  store_word(words, word * stride, load_word(words, word * stride) | (value << shift));
  if (shift + bits > 32)
    store_word(words, (word + 1) * stride, load_word(words, (word + 1) * stride) | (value >> (32 - shift)));
}

// The padded layout (compressed-tensors before mid 2026 for widths that do not divide 32):
// 32/bits fields to a word, high bits unused; field i at word i / (32/bits), shift
// (i % (32/bits)) * bits. Identical to the bitstream for bits 1, 2, 4 and 8.
inline std::uint32_t get_padded_field(const std::byte* words, std::uint64_t stride, std::uint64_t index,
                                      unsigned bits) noexcept {
  const unsigned per_word = 32 / bits;
  const unsigned shift = static_cast<unsigned>(index % per_word) * bits;
  return (load_word(words, index / per_word * stride) >> shift) & field_mask(bits);
}
inline void or_padded_field(std::byte* words, std::uint64_t stride, std::uint64_t index, unsigned bits,
                            std::uint32_t value) noexcept {
  const unsigned per_word = 32 / bits;
  const std::uint64_t word = index / per_word * stride;
  store_word(words, word, load_word(words, word) | (value << (index % per_word * bits)));
}
// Words holding `count` fields in the padded layout.
constexpr std::uint64_t padded_words(std::uint64_t count, unsigned bits) noexcept {
  return ceil_div_u64(count, 32 / bits);
}

// The 32 values of width B held by the B words `w` (a bitstream chunk). Unrolled with constant
// shifts for each B.
template <unsigned B>
inline void unpack32(const std::uint32_t* w, std::int32_t* out) noexcept {
  constexpr std::uint32_t mask = field_mask(B);
#pragma GCC unroll 32
  for (unsigned i = 0; i < 32; ++i) {
    const unsigned pos = i * B;
    const unsigned shift = pos % 32;
    std::uint32_t v = w[pos / 32] >> shift;
    if (shift + B > 32) v |= w[pos / 32 + 1] << (32 - shift);
    out[i] = static_cast<std::int32_t>(v & mask);
  }
}

// The B words of a 32-value chunk from 32 values < 2^B (inverse of unpack32).
template <unsigned B>
inline void pack32(const std::int32_t* values, std::uint32_t* w) noexcept {
  for (unsigned i = 0; i < B; ++i) w[i] = 0;
#pragma GCC unroll 32
  for (unsigned i = 0; i < 32; ++i) {
    const unsigned pos = i * B;
    const unsigned shift = pos % 32;
    const auto v = static_cast<std::uint32_t>(values[i]);
    w[pos / 32] |= v << shift;
    if (shift + B > 32) w[pos / 32 + 1] |= v >> (32 - shift);
  }
}

// Values [0, count) of the contiguous bitstream at `words` into out[0, count).
void unpack_stream(const std::byte* words, std::uint64_t count, unsigned bits, std::int32_t* out) noexcept;
// Values [0, count) in the padded layout (see get_padded_field).
void unpack_padded(const std::byte* words, std::uint64_t count, unsigned bits, std::int32_t* out) noexcept;

// The group of every column of K: contiguous runs of `size` columns, or an explicit g_idx.
struct GroupMap {
  std::uint64_t size = 1;            // columns per group when `index` is empty
  std::uint64_t count = 0;           // number of groups
  std::vector<std::uint32_t> index;  // g_idx[k] (validated < count); empty when it is k / size
};

// GroupMap for K columns in groups of `group_size` (0 or >= K: one group); with `g_idx` (I32 or
// I64 [K]) when it is not null, every entry checked to lie in [0, groups): else kCorrupt naming
// the part, the index and the value. A g_idx equal to k / group_size (what writers store without
// act-order) gives the contiguous map.
Result<GroupMap> make_group_map(const LogicalTensor& t, std::uint64_t cols, std::uint64_t group_size,
                                const PartBytes* g_idx);

// out[i] = s[g] * float(q[i] - z[g]) with g the group of column k0 + i, for i < count. `z` and
// `s` hold one entry per group (the zero points and scales of one output row).
void dequant_span(const std::int32_t* q, std::uint64_t k0, std::uint64_t count, const GroupMap& groups,
                  const std::int32_t* z, const float* s, float* out) noexcept;

// The part `role` checked against `expected` (dtype one of `dtypes`, byte size of the expected
// shape in that dtype): kCorrupt naming the tensor, the part, expected and found, or a missing part.
Result<const PartBytes*> checked_part(const LogicalTensor& t, std::span<const PartBytes> parts, std::string_view role,
                                      std::span<const DType> dtypes, const Shape& expected);
// Same for an optional part: nullptr when absent.
Result<const PartBytes*> checked_optional_part(const LogicalTensor& t, std::span<const PartBytes> parts,
                                               std::string_view role, std::span<const DType> dtypes,
                                               const Shape& expected);

// kInvalidArgument unless out holds exactly (row_end - row_begin) * cols floats.
Status check_output(const LogicalTensor& t, std::uint64_t row_begin, std::uint64_t row_end, std::size_t out_size);

// Dtypes accepted for packed int32 words, scales and index parts (g_idx, weight_shape).
inline constexpr std::array<DType, 2> kWordDtypes = {DType::kI32, DType::kU32};
inline constexpr std::array<DType, 3> kScaleDtypes = {DType::kF16, DType::kBF16, DType::kF32};
inline constexpr std::array<DType, 2> kIndexDtypes = {DType::kI32, DType::kI64};

}  // namespace qload::formats::detail

// AWQ decoders (AutoAWQ, 4-bit), ../shared/formats.md section 2. Group g = k / group_size.
// GEMM: qweight [K, N/8] packed along N, column 8c + j in nibble [0,4,1,5,2,6,3,7][j] of word c
//       (the inverse of the pack order [0,2,4,6,1,3,5,7]); qzeros [groups, N/8] alike; scales
//       [groups, N].
// GEMV: qweight [N, K/8] packed along K in natural order; qzeros [N, Wz] along groups, natural
//       order; scales [N, 8*Wz], zero-padded past column `groups`.
//   W[n, k] = scales * (q[k, n] - z), one f32 multiply.
#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "bitstream.hpp"
#include "row_decoders.hpp"

namespace qload::formats::detail {
namespace {

constexpr std::array<unsigned, 8> kNibble = {0, 4, 1, 5, 2, 6, 3, 7};

struct AwqParts {
  const PartBytes* qweight = nullptr;
  const PartBytes* qzeros = nullptr;
  const PartBytes* scales = nullptr;
  PackedShapes shapes;
};

// GEMM: output rows 8c .. 8c+7 are the nibbles of qweight's word column c. Tiles of
// kTileWords adjacent word columns (64 rows) by kTileCols columns of K: a tile's words of one
// qweight row share a cache line, and its codes (64 x 128 int32 = 32 KiB) stay in L1.
constexpr std::uint64_t kTileWords = 8;
constexpr std::uint64_t kTileCols = 128;

void decode_gemm(const LogicalTensor& t, const AwqParts& p, const GroupMap& groups, std::uint64_t row_begin,
                 std::uint64_t row_end, float* out) {
  const std::uint64_t n = t.rows;
  const std::uint64_t k = t.cols;
  const std::uint64_t w = p.shapes.weight[1];
  const std::byte* qw = p.qweight->bytes.data();
  const std::byte* qz = p.qzeros->bytes.data();
  constexpr std::uint64_t kTileRows = 8 * kTileWords;
  std::vector<std::int32_t> q(static_cast<std::size_t>(kTileRows * kTileCols));
  std::vector<std::int32_t> z(static_cast<std::size_t>(kTileRows * groups.count));
  std::vector<float> s(z.size());
  for (std::uint64_t c0 = row_begin / 8; c0 * 8 < row_end; c0 += kTileWords) {
    const std::uint64_t words = std::min(kTileWords, ceil_div_u64(row_end, 8) - c0);
    const std::uint64_t r0 = std::max(row_begin, c0 * 8);
    const std::uint64_t r1 = std::min(row_end, (c0 + words) * 8);
    for (std::uint64_t r = r0; r < r1; ++r) {
      const std::uint64_t j = r - c0 * 8;
      for (std::uint64_t g = 0; g < groups.count; ++g) {
        z[j * groups.count + g] =
            static_cast<std::int32_t>((load_word(qz, g * w + r / 8) >> (4 * kNibble[r % 8])) & 15);
        s[j * groups.count + g] = load_scale(*p.scales, g * n + r);
      }
    }
    for (std::uint64_t k0 = 0; k0 < k; k0 += kTileCols) {
      const std::uint64_t cols = std::min(kTileCols, k - k0);
      for (std::uint64_t i = 0; i < cols; ++i)
        for (std::uint64_t c = 0; c < words; ++c) {
          const std::uint32_t word = load_word(qw, (k0 + i) * w + c0 + c);
#pragma GCC unroll 8
          for (unsigned j = 0; j < 8; ++j)
            q[(c * 8 + j) * kTileCols + i] = static_cast<std::int32_t>((word >> (4 * kNibble[j])) & 15);
        }
      for (std::uint64_t r = r0; r < r1; ++r) {
        const std::uint64_t j = r - c0 * 8;
        dequant_span(q.data() + j * kTileCols, k0, cols, groups, z.data() + j * groups.count,
                     s.data() + j * groups.count, out + (r - row_begin) * k + k0);
      }
    }
  }
}

// GEMV: row r's zero points (a natural-order bitstream along groups) and scales, one a group.
void gemv_row_params(const AwqParts& p, const GroupMap& groups, std::uint64_t r, std::int32_t* z, float* s) {
  const std::uint64_t wz = p.shapes.zeros[1], sw = p.shapes.scales[1];
  for (std::uint64_t g = 0; g < groups.count; ++g) {
    z[g] = static_cast<std::int32_t>(get_field(p.qzeros->bytes.data() + r * wz * 4, 1, g, 4));
    s[g] = load_scale(*p.scales, r * sw + g);
  }
}

// GEMV: each output row is a contiguous bitstream of K nibbles.
void decode_gemv(const LogicalTensor& t, const AwqParts& p, const GroupMap& groups, std::uint64_t row_begin,
                 std::uint64_t row_end, float* out) {
  const std::uint64_t k = t.cols;
  const std::uint64_t wk = p.shapes.weight[1];
  std::vector<std::int32_t> q(static_cast<std::size_t>(k));
  std::vector<std::int32_t> z(static_cast<std::size_t>(groups.count));
  std::vector<float> s(z.size());
  for (std::uint64_t r = row_begin; r < row_end; ++r) {
    gemv_row_params(p, groups, r, z.data(), s.data());
    unpack_stream(p.qweight->bytes.data() + r * wk * 4, k, 4, q.data());
    dequant_span(q.data(), 0, k, groups, z.data(), s.data(), out + (r - row_begin) * k);
  }
}

}  // namespace

// The parts checked against the weight's packed shapes.
Result<AwqParts> awq_parts(const LogicalTensor& t, std::span<const PartBytes> parts) {
  if (t.params.scheme != QuantScheme::kAwqGemm && t.params.scheme != QuantScheme::kAwqGemv)
    return fail(Errc::kInternal, "dequantize_awq: wrong scheme");
  AwqParts p;
  QLOAD_ASSIGN_OR_RETURN(p.shapes, packed_shapes(t));
  QLOAD_ASSIGN_OR_RETURN(p.qweight, checked_part(t, parts, "qweight", kWordDtypes, p.shapes.weight));
  QLOAD_ASSIGN_OR_RETURN(p.qzeros, checked_part(t, parts, "qzeros", kWordDtypes, p.shapes.zeros));
  QLOAD_ASSIGN_OR_RETURN(p.scales, checked_part(t, parts, "scales", kScaleDtypes, p.shapes.scales));
  return p;
}

Status dequantize_awq(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                      std::uint64_t row_end, std::span<float> out) {
  QLOAD_ASSIGN_OR_RETURN(const AwqParts p, awq_parts(t, parts));
  QLOAD_TRY(check_output(t, row_begin, row_end, out.size()));
  QLOAD_ASSIGN_OR_RETURN(const GroupMap groups, make_group_map(t, t.cols, t.params.group_size, nullptr));
  if (t.params.scheme == QuantScheme::kAwqGemv) {
    decode_gemv(t, p, groups, row_begin, row_end, out.data());
  } else {
    decode_gemm(t, p, groups, row_begin, row_end, out.data());
  }
  return {};
}

// GEMV rows are GPTQ's 4-bit rows with their words adjacent (stride 1) and the same arithmetic,
// so they go through decode_gptq_row_avx2, which writes the output dtype itself.
Result<bool> dequantize_awq_direct(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                                   std::uint64_t row_end, DType dtype, std::span<std::byte> out) {
  QLOAD_ASSIGN_OR_RETURN(const AwqParts p, awq_parts(t, parts));
  QLOAD_ASSIGN_OR_RETURN(const GroupMap groups, make_group_map(t, t.cols, t.params.group_size, nullptr));
  if (t.params.scheme != QuantScheme::kAwqGemv || groups.size % 16 != 0 || t.cols % 16 != 0 || !cpu_has_avx2())
    return false;
  const std::uint64_t k = t.cols, wk = p.shapes.weight[1];
  const std::uint64_t row_bytes = k * dtype_info(dtype).block_bytes;
  std::vector<std::int32_t> z(static_cast<std::size_t>(groups.count));
  std::vector<float> s(z.size());
  for (std::uint64_t r = row_begin; r < row_end; ++r) {
    gemv_row_params(p, groups, r, z.data(), s.data());
    if (!decode_gptq_row_avx2(4, p.qweight->bytes.data() + r * wk * 4, 1, 0, k / 8,
                              GptqGroups{.words = groups.size / 8}, z.data(), s.data(), dtype,
                              out.data() + (r - row_begin) * row_bytes))
      return fail(Errc::kInternal, "decode_gptq_row_avx2 refused an AWQ GEMV row it was sized for");
  }
  return true;
}

}  // namespace qload::formats::detail

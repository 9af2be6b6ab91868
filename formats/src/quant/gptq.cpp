// GPTQ decoder (v1 and v2; 2, 3, 4 and 8 bits). qweight [K*b/32, N] holds column n as a
// bitstream along K (the b words of 32-row chunk t are qweight[t*b .. t*b+b-1, n]); qzeros
// [groups, ceil(N*b/32)] holds row g as a bitstream along N; scales [groups, N].
//   W[n, k] = scales[g, n] * (q[k, n] - z[g, n]),  g = g_idx[k] or k / group_size
// v1 stores z - 1: z = (stored + 1) & (2^b - 1) per field (the inference kernels' reading), or
// for GPTQModel's files the field of (stored word + gptq_v1_word_offset(b)) mod 2^32
// (QuantParams::gptq_v1_whole_word; ../shared/formats.md section 1).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "bitstream.hpp"
#include "row_decoders.hpp"

namespace qload::formats::detail {
namespace {

struct GptqParts {
  const PartBytes* qweight = nullptr;
  const PartBytes* qzeros = nullptr;
  const PartBytes* scales = nullptr;
  std::uint64_t zeros_words = 0;  // words per qzeros row
  GroupMap groups;
};

// The parts checked against the weight's packed shapes, and its group map.
Result<GptqParts> gptq_parts(const LogicalTensor& t, std::span<const PartBytes> parts) {
  if (t.params.scheme != QuantScheme::kGptq) return fail(Errc::kInternal, "dequantize_gptq: wrong scheme");
  QLOAD_ASSIGN_OR_RETURN(const PackedShapes shapes, packed_shapes(t));
  GptqParts p;
  QLOAD_ASSIGN_OR_RETURN(p.qweight, checked_part(t, parts, "qweight", kWordDtypes, shapes.weight));
  QLOAD_ASSIGN_OR_RETURN(p.qzeros, checked_part(t, parts, "qzeros", kWordDtypes, shapes.zeros));
  QLOAD_ASSIGN_OR_RETURN(p.scales, checked_part(t, parts, "scales", kScaleDtypes, shapes.scales));
  QLOAD_ASSIGN_OR_RETURN(const PartBytes* g_idx, checked_optional_part(t, parts, "g_idx", kIndexDtypes, Shape{t.cols}));
  QLOAD_ASSIGN_OR_RETURN(p.groups, make_group_map(t, t.cols, t.params.group_size, g_idx));
  p.zeros_words = shapes.zeros[1];
  return p;
}

// Zero points and scales of output row n, one entry per group.
void load_row_params(const LogicalTensor& t, const GptqParts& p, std::uint64_t n, std::int32_t* z, float* s) {
  const GroupMap& groups = p.groups;
  const unsigned b = t.params.bits;
  const std::uint32_t mask = field_mask(b);
  const bool v1 = t.params.gptq_version == 1;
  const std::uint32_t word_offset = v1 && t.params.gptq_v1_whole_word ? gptq_v1_word_offset(b) : 0;
  for (std::uint64_t g = 0; g < groups.count; ++g) {
    const std::byte* row = p.qzeros->bytes.data() + g * p.zeros_words * 4;
    if (word_offset != 0) {  // b divides 32: the field is inside one word
      const std::uint32_t word = load_word(row, n * b / 32) + word_offset;
      z[g] = static_cast<std::int32_t>((word >> (n * b % 32)) & mask);
      s[g] = load_scale(*p.scales, g * t.rows + n);
      continue;
    }
    const std::uint32_t stored = get_field(row, 1, n, b);
    z[g] = static_cast<std::int32_t>(v1 ? (stored + 1) & mask : stored);
    s[g] = load_scale(*p.scales, g * t.rows + n);
  }
}

// Row n of the output is column n of qweight: for each 32-row chunk of K, B words N apart.
// Tiles of kTileRows output rows by kTileCols columns of K: the tile's words of one qweight row
// are adjacent (one cache line for 16 int32), so each line is loaded once per tile rather than
// once per output row; the unpacked codes (16 x 512 int32 = 32 KiB) stay in L1.
constexpr std::uint64_t kTileRows = 16;
constexpr std::uint64_t kTileCols = 512;

template <unsigned B>
void decode_rows(const LogicalTensor& t, const GptqParts& p, std::uint64_t row_begin, std::uint64_t row_end,
                 float* out) {
  const GroupMap& groups = p.groups;
  const std::uint64_t n_cols = t.rows;
  const std::uint64_t k = t.cols;
  const std::byte* qw = p.qweight->bytes.data();
  std::vector<std::int32_t> q(static_cast<std::size_t>(kTileRows * kTileCols));
  std::vector<std::int32_t> z(static_cast<std::size_t>(kTileRows * groups.count));
  std::vector<float> s(z.size());
  std::uint32_t w[B];
  for (std::uint64_t n0 = row_begin; n0 < row_end; n0 += kTileRows) {
    const std::uint64_t rows = std::min(kTileRows, row_end - n0);
    for (std::uint64_t j = 0; j < rows; ++j)
      load_row_params(t, p, n0 + j, z.data() + j * groups.count, s.data() + j * groups.count);
    for (std::uint64_t k0 = 0; k0 < k; k0 += kTileCols) {
      const std::uint64_t cols = std::min(kTileCols, k - k0);  // a multiple of 32
      for (std::uint64_t c = 0; c < cols / 32; ++c) {
        const std::uint64_t chunk = k0 / 32 + c;
        for (std::uint64_t j = 0; j < rows; ++j) {
          for (unsigned i = 0; i < B; ++i) w[i] = load_word(qw, (chunk * B + i) * n_cols + n0 + j);
          unpack32<B>(w, q.data() + j * kTileCols + c * 32);
        }
      }
      for (std::uint64_t j = 0; j < rows; ++j)
        dequant_span(q.data() + j * kTileCols, k0, cols, groups, z.data() + j * groups.count,
                     s.data() + j * groups.count, out + (n0 + j - row_begin) * k + k0);
    }
  }
}

}  // namespace

Status dequantize_gptq(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                       std::uint64_t row_end, std::span<float> out) {
  QLOAD_ASSIGN_OR_RETURN(const GptqParts p, gptq_parts(t, parts));
  QLOAD_TRY(check_output(t, row_begin, row_end, out.size()));
  switch (t.params.bits) {
    case 2: decode_rows<2>(t, p, row_begin, row_end, out.data()); break;
    case 3: decode_rows<3>(t, p, row_begin, row_end, out.data()); break;
    case 4: decode_rows<4>(t, p, row_begin, row_end, out.data()); break;
    case 8: decode_rows<8>(t, p, row_begin, row_end, out.data()); break;
    default: return fail(Errc::kInternal, "GPTQ bits not checked by packed_shapes");
  }
  return {};
}

// The same tiles as decode_rows (16 output rows by 512 columns, so each qweight line is loaded
// once per tile), each row of a tile through decode_gptq_row_avx2, which writes the output dtype
// itself: measured against decode_rows' unpack-then-scale loop and the F32 slab it needs for
// BF16, see docs/benchmarks-log.md ("GPTQ 4-bit through AVX2"). 3 bits (fields across words) stay
// with decode_rows.
Result<bool> dequantize_gptq_direct(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                                    std::uint64_t row_end, DType dtype, std::span<std::byte> out) {
  QLOAD_ASSIGN_OR_RETURN(const GptqParts p, gptq_parts(t, parts));
  const GroupMap& groups = p.groups;
  const unsigned b = t.params.bits;
  if ((b != 2 && b != 4 && b != 8) || (groups.index.empty() && groups.size % 16 != 0) || t.cols % 16 != 0 ||
      !cpu_has_avx2())
    return false;
  const std::uint64_t elem = dtype_info(dtype).block_bytes, words = t.cols * b / 32, tile_words = kTileCols * b / 32;
  const GptqGroups row_groups{.words = groups.size * b / 32,
                              .index = groups.index.empty() ? nullptr : groups.index.data()};
  std::vector<std::int32_t> z(static_cast<std::size_t>(kTileRows * groups.count));
  std::vector<float> s(z.size());
  for (std::uint64_t n0 = row_begin; n0 < row_end; n0 += kTileRows) {
    const std::uint64_t rows = std::min(kTileRows, row_end - n0);
    for (std::uint64_t j = 0; j < rows; ++j)
      load_row_params(t, p, n0 + j, z.data() + j * groups.count, s.data() + j * groups.count);
    for (std::uint64_t w0 = 0; w0 < words; w0 += tile_words) {
      const std::uint64_t w1 = std::min(words, w0 + tile_words);
      for (std::uint64_t j = 0; j < rows; ++j) {
        std::byte* row = out.data() + ((n0 + j - row_begin) * t.cols + w0 * 32 / b) * elem;
        if (!decode_gptq_row_avx2(b, p.qweight->bytes.data() + (n0 + j) * 4, t.rows, w0, w1, row_groups,
                                  z.data() + j * groups.count, s.data() + j * groups.count, dtype, row))
          return fail(Errc::kInternal, "decode_gptq_row_avx2 refused a row it was sized for");
      }
    }
  }
  return true;
}

}  // namespace qload::formats::detail

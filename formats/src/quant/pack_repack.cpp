// The repacking operations of quant_pack.hpp: GPTQ v1 zeros to v2, AWQ GEMM to GPTQ v2, and
// GPTQ act-order rows sorted into contiguous groups (with the permutation a server applies to
// activations). All keep the dequantized values exactly.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "bitstream.hpp"
#include "qload/formats/quant_pack.hpp"

namespace qload::formats {
namespace {

using detail::field_mask;
using detail::load_word;
using detail::store_word;

constexpr std::array<unsigned, 8> kAwqNibble = {0, 4, 1, 5, 2, 6, 3, 7};  // nibble of column 8c + j

Status wrong_scheme(const LogicalTensor& t, std::string_view fn) {
  return fail(Error(Errc::kInvalidArgument, fmt::format("{} given a {} tensor", fn, static_cast<int>(t.params.scheme)))
                  .with_tensor(t.name));
}

Status check_bytes(const LogicalTensor& t, std::string_view what, std::size_t have, const Shape& shape, DType dtype) {
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t want, shape.nbytes(dtype));
  if (have != want)
    return fail(Error(Errc::kInvalidArgument, fmt::format("{}: {} bytes given, {} expected ({} {})", what, have, want,
                                                          dtype_name(dtype), shape.to_string()))
                    .with_tensor(t.name));
  return {};
}

// A natural-order AWQ word: nibble j holds column 8c + j.
std::uint32_t awq_word_to_natural(std::uint32_t w) {
  std::uint32_t out = 0;
  for (unsigned j = 0; j < 8; ++j) out |= ((w >> (4 * kAwqNibble[j])) & 15) << (4 * j);
  return out;
}

// Moves rows of a GPTQ qweight: row k of `out` gets row perm[k] of `in`, for columns in blocks
// of 16 (so a block's words of one word row share a cache line).
template <unsigned B>
void permute_rows(std::span<const std::byte> in, std::uint64_t k, std::uint64_t n, std::span<const std::int32_t> perm,
                  std::span<std::byte> out) {
  constexpr std::uint64_t kBlock = 16;
  std::vector<std::uint8_t> column(static_cast<std::size_t>(kBlock * k));
  std::int32_t values[32];
  std::uint32_t w[B];
  for (std::uint64_t n0 = 0; n0 < n; n0 += kBlock) {
    const std::uint64_t cols = std::min(kBlock, n - n0);
    for (std::uint64_t chunk = 0; chunk < k / 32; ++chunk)
      for (std::uint64_t j = 0; j < cols; ++j) {
        for (unsigned i = 0; i < B; ++i) w[i] = load_word(in.data(), (chunk * B + i) * n + n0 + j);
        detail::unpack32<B>(w, values);
        for (unsigned i = 0; i < 32; ++i) column[j * k + chunk * 32 + i] = static_cast<std::uint8_t>(values[i]);
      }
    for (std::uint64_t chunk = 0; chunk < k / 32; ++chunk)
      for (std::uint64_t j = 0; j < cols; ++j) {
        for (unsigned i = 0; i < 32; ++i) values[i] = column[j * k + static_cast<std::uint64_t>(perm[chunk * 32 + i])];
        detail::pack32<B>(values, w);
        for (unsigned i = 0; i < B; ++i) store_word(out.data(), (chunk * B + i) * n + n0 + j, w[i]);
      }
  }
}

}  // namespace

Status gptq_v1_zeros_to_v2(const LogicalTensor& t, std::span<const std::byte> qzeros_v1,
                           std::span<std::byte> qzeros_v2) {
  if (t.params.scheme != QuantScheme::kGptq) return wrong_scheme(t, "gptq_v1_zeros_to_v2");
  QLOAD_ASSIGN_OR_RETURN(const PackedShapes s, packed_shapes(t));
  QLOAD_TRY(check_bytes(t, "qzeros_v1", qzeros_v1.size(), s.zeros, DType::kI32));
  QLOAD_TRY(check_bytes(t, "qzeros_v2", qzeros_v2.size(), s.zeros, DType::kI32));
  const unsigned b = t.params.bits;
  const std::uint64_t zw = s.zeros[1];
  if (const std::uint32_t offset = t.params.gptq_v1_whole_word ? gptq_v1_word_offset(b) : 0; offset != 0) {
    for (std::uint64_t i = 0; i < s.groups * zw; ++i)  // GPTQModel's own v1 -> v2: every word plus offset
      detail::store_word(qzeros_v2.data(), i, detail::load_word(qzeros_v1.data(), i) + offset);
    return {};
  }
  std::vector<std::byte> row(static_cast<std::size_t>(zw * 4));  // in and out may be the same bytes
  for (std::uint64_t g = 0; g < s.groups; ++g) {
    std::fill(row.begin(), row.end(), std::byte{0});
    const std::byte* in = qzeros_v1.data() + g * zw * 4;
    for (std::uint64_t c = 0; c < t.rows; ++c)
      detail::or_field(row.data(), 1, c, b, (detail::get_field(in, 1, c, b) + 1) & field_mask(b));
    std::memcpy(qzeros_v2.data() + g * zw * 4, row.data(), row.size());
  }
  return {};
}

LogicalTensor awq_gemm_as_gptq(const LogicalTensor& awq) {
  LogicalTensor t;
  t.name = awq.name;
  t.rows = awq.rows;
  t.cols = awq.cols;
  t.params = awq.params;
  t.params.scheme = QuantScheme::kGptq;
  t.params.bits = 4;
  t.params.gptq_version = 2;
  t.params.weight_dtype = DType::kI32;
  return t;
}

Status awq_gemm_to_gptq(const LogicalTensor& awq, std::span<const std::byte> qweight, std::span<const std::byte> qzeros,
                        std::span<std::byte> gptq_qweight, std::span<std::byte> gptq_qzeros) {
  if (awq.params.scheme != QuantScheme::kAwqGemm) return wrong_scheme(awq, "awq_gemm_to_gptq");
  QLOAD_ASSIGN_OR_RETURN(const PackedShapes a, packed_shapes(awq));
  QLOAD_ASSIGN_OR_RETURN(const PackedShapes g, packed_shapes(awq_gemm_as_gptq(awq)));
  QLOAD_TRY(check_bytes(awq, "qweight", qweight.size(), a.weight, DType::kI32));
  QLOAD_TRY(check_bytes(awq, "qzeros", qzeros.size(), a.zeros, DType::kI32));
  QLOAD_TRY(check_bytes(awq, "gptq qweight", gptq_qweight.size(), g.weight, DType::kI32));
  QLOAD_TRY(check_bytes(awq, "gptq qzeros", gptq_qzeros.size(), g.zeros, DType::kI32));
  const std::uint64_t n = awq.rows;
  const std::uint64_t w = a.weight[1];
  // qweight: AWQ row k (packed along N) becomes nibble k % 8 of GPTQ word row k / 8.
  std::fill(gptq_qweight.begin(), gptq_qweight.end(), std::byte{0});
  std::vector<std::uint32_t> acc(static_cast<std::size_t>(n));
  for (std::uint64_t k0 = 0; k0 < awq.cols; k0 += 8) {
    std::fill(acc.begin(), acc.end(), 0u);
    for (std::uint64_t i = 0; i < 8; ++i)
      for (std::uint64_t c = 0; c < n; ++c)
        acc[c] |= ((load_word(qweight.data(), (k0 + i) * w + c / 8) >> (4 * kAwqNibble[c % 8])) & 15) << (4 * i);
    for (std::uint64_t c = 0; c < n; ++c) store_word(gptq_qweight.data(), k0 / 8 * n + c, acc[c]);
  }
  // qzeros: same words, nibbles in natural order ([groups, ceil(N/8)] in both).
  for (std::uint64_t i = 0; i < a.zeros[0] * a.zeros[1]; ++i)
    store_word(gptq_qzeros.data(), i, awq_word_to_natural(load_word(qzeros.data(), i)));
  // Fields past column N would be garbage in the natural order only if the AWQ word held them;
  // clear them so the output is exactly what a GPTQ writer produces.
  if (n % 8 != 0)
    for (std::uint64_t r = 0; r < a.zeros[0]; ++r) {
      const std::uint64_t i = r * a.zeros[1] + a.zeros[1] - 1;
      store_word(gptq_qzeros.data(), i, load_word(gptq_qzeros.data(), i) & field_mask(4 * (n % 8)));
    }
  return {};
}

Status gptq_act_order_sort(const LogicalTensor& t, std::span<const std::byte> g_idx, std::span<const std::byte> qweight,
                           std::span<std::int32_t> perm, std::span<std::byte> qweight_out,
                           std::span<std::byte> g_idx_out) {
  if (t.params.scheme != QuantScheme::kGptq) return wrong_scheme(t, "gptq_act_order_sort");
  QLOAD_ASSIGN_OR_RETURN(const PackedShapes s, packed_shapes(t));
  const std::uint64_t k = t.cols;
  QLOAD_TRY(check_bytes(t, "g_idx", g_idx.size(), Shape{k}, DType::kI32));
  QLOAD_TRY(check_bytes(t, "g_idx_out", g_idx_out.size(), Shape{k}, DType::kI32));
  QLOAD_TRY(check_bytes(t, "perm", perm.size_bytes(), Shape{k}, DType::kI32));
  QLOAD_TRY(check_bytes(t, "qweight", qweight.size(), s.weight, DType::kI32));
  QLOAD_TRY(check_bytes(t, "qweight_out", qweight_out.size(), s.weight, DType::kI32));
  if (k > static_cast<std::uint64_t>(INT32_MAX))
    return fail(Error(Errc::kUnsupported, fmt::format("act-order sort of K = {} columns", k)).with_tensor(t.name));
  const PartBytes part{.role = "g_idx", .dtype = DType::kI32, .shape = Shape{k}, .bytes = g_idx};
  QLOAD_ASSIGN_OR_RETURN(detail::GroupMap groups, detail::make_group_map(t, k, t.params.group_size, &part));
  if (groups.index.empty())  // already contiguous: the identity permutation
    for (std::uint64_t i = 0; i < k; ++i) groups.index.push_back(static_cast<std::uint32_t>(i / groups.size));
  // Counting sort by group: stable, O(K + groups).
  std::vector<std::uint64_t> start(static_cast<std::size_t>(groups.count + 1), 0);
  for (const std::uint32_t g : groups.index) ++start[g + 1];
  for (std::uint64_t g = 0; g < groups.count; ++g) start[g + 1] += start[g];
  for (std::uint64_t i = 0; i < k; ++i) {
    const std::uint32_t g = groups.index[i];
    perm[start[g]] = static_cast<std::int32_t>(i);
    ++start[g];
  }
  for (std::uint64_t i = 0; i < k; ++i) {
    const auto g = static_cast<std::int32_t>(groups.index[static_cast<std::size_t>(perm[i])]);
    std::memcpy(g_idx_out.data() + i * 4, &g, 4);
  }
  std::span<const std::int32_t> order(perm.data(), perm.size());
  switch (t.params.bits) {
    case 2: permute_rows<2>(qweight, k, t.rows, order, qweight_out); break;
    case 3: permute_rows<3>(qweight, k, t.rows, order, qweight_out); break;
    case 4: permute_rows<4>(qweight, k, t.rows, order, qweight_out); break;
    case 8: permute_rows<8>(qweight, k, t.rows, order, qweight_out); break;
    default: return fail(Errc::kInternal, "GPTQ bits not checked by packed_shapes");
  }
  return {};
}

}  // namespace qload::formats

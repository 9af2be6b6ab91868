// Bitstream fields, part checks, group maps and the shared dequantization kernel (bitstream.hpp).
#include "bitstream.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include <fmt/format.h>

namespace qload::formats::detail {
namespace {

template <unsigned B>
void unpack_stream_b(const std::byte* words, std::uint64_t count, std::int32_t* out) noexcept {
  const std::uint64_t chunks = count / 32;
  std::uint32_t w[B];
  for (std::uint64_t c = 0; c < chunks; ++c) {
    for (unsigned i = 0; i < B; ++i) w[i] = load_word(words, c * B + i);
    unpack32<B>(w, out + c * 32);
  }
  for (std::uint64_t i = chunks * 32; i < count; ++i) out[i] = static_cast<std::int32_t>(get_field(words, 1, i, B));
}

std::string dtype_list(std::span<const DType> dtypes) {
  std::string s;
  for (std::size_t i = 0; i < dtypes.size(); ++i) {
    if (i != 0) s += i + 1 == dtypes.size() ? " or " : ", ";
    s += dtype_name(dtypes[i]);
  }
  return s;
}

Status check_part(const LogicalTensor& t, const PartBytes& p, std::span<const DType> dtypes, const Shape& expected) {
  if (std::find(dtypes.begin(), dtypes.end(), p.dtype) == dtypes.end())
    return fail(
        Error(Errc::kCorrupt, fmt::format("part '{}' has dtype {} {}, expected {} {}", p.role, dtype_name(p.dtype),
                                          p.shape.to_string(), dtype_list(dtypes), expected.to_string()))
            .with_tensor(t.name));
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t bytes, expected.nbytes(p.dtype));
  if (p.bytes.size() != bytes)
    return fail(Error(Errc::kCorrupt,
                      fmt::format("part '{}' holds {} bytes ({} {}), expected {} bytes ({} {} of a [{}, {}] weight)",
                                  p.role, p.bytes.size(), dtype_name(p.dtype), p.shape.to_string(), bytes,
                                  dtype_name(p.dtype), expected.to_string(), t.rows, t.cols))
                    .with_tensor(t.name));
  return {};
}

}  // namespace

void unpack_stream(const std::byte* words, std::uint64_t count, unsigned bits, std::int32_t* out) noexcept {
  switch (bits) {
    case 1: return unpack_stream_b<1>(words, count, out);
    case 2: return unpack_stream_b<2>(words, count, out);
    case 3: return unpack_stream_b<3>(words, count, out);
    case 4: return unpack_stream_b<4>(words, count, out);
    case 5: return unpack_stream_b<5>(words, count, out);
    case 6: return unpack_stream_b<6>(words, count, out);
    case 7: return unpack_stream_b<7>(words, count, out);
    case 8: return unpack_stream_b<8>(words, count, out);
    default:
      for (std::uint64_t i = 0; i < count; ++i) out[i] = static_cast<std::int32_t>(get_field(words, 1, i, bits));
  }
}

void unpack_padded(const std::byte* words, std::uint64_t count, unsigned bits, std::int32_t* out) noexcept {
  const unsigned per_word = 32 / bits;
  const std::uint32_t mask = field_mask(bits);
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint32_t w = load_word(words, i / per_word);
    out[i] = static_cast<std::int32_t>((w >> (i % per_word * bits)) & mask);
  }
}

Result<GroupMap> make_group_map(const LogicalTensor& t, std::uint64_t cols, std::uint64_t group_size,
                                const PartBytes* g_idx) {
  GroupMap map;
  map.size = group_size == 0 || group_size > cols ? std::max<std::uint64_t>(cols, 1) : group_size;
  map.count = ceil_div_u64(cols, map.size);
  if (t.params.groups != 0) {  // a shard indexing the whole weight's groups
    if (g_idx == nullptr)
      return fail(Error(Errc::kCorrupt, fmt::format("a stored group count ({}) needs a g_idx part", t.params.groups))
                      .with_tensor(t.name));
    map.count = t.params.groups;
  }
  if (g_idx == nullptr) return map;
  map.index.resize(static_cast<std::size_t>(cols));
  const bool wide = g_idx->dtype == DType::kI64;
  for (std::uint64_t k = 0; k < cols; ++k) {
    std::int64_t v;
    if (wide) {
      std::memcpy(&v, g_idx->bytes.data() + k * 8, 8);
    } else {
      std::int32_t v32;
      std::memcpy(&v32, g_idx->bytes.data() + k * 4, 4);
      v = v32;
    }
    if (v < 0 || static_cast<std::uint64_t>(v) >= map.count)
      return fail(Error(Errc::kCorrupt, fmt::format("part '{}': entry {} is {}, outside the {} groups [0, {})",
                                                    g_idx->role, k, v, map.count, map.count))
                      .with_tensor(t.name));
    map.index[static_cast<std::size_t>(k)] = static_cast<std::uint32_t>(v);
  }
  // Writers store g_idx = k / group_size without act-order too: then contiguous runs are faster.
  bool contiguous = true;
  for (std::uint64_t k = 0; k < cols && contiguous; ++k) contiguous = map.index[k] == k / map.size;
  if (contiguous) map.index.clear();
  return map;
}

// Both loops work in blocks of kLanes with a fixed trip count, which GCC vectorises at -O2 (its
// very-cheap cost model skips loops of unknown trip count); the remainder runs scalar.
constexpr std::uint64_t kLanes = 8;

void dequant_span(const std::int32_t* q, std::uint64_t k0, std::uint64_t count, const GroupMap& groups,
                  const std::int32_t* z, const float* s, float* out) noexcept {
  if (!groups.index.empty()) {
    const std::uint32_t* gi = groups.index.data() + k0;
    for (std::uint64_t i = 0; i < count; ++i) out[i] = s[gi[i]] * static_cast<float>(q[i] - z[gi[i]]);
    return;
  }
  // Contiguous groups: constant scale and zero over each run.
  std::uint64_t i = 0;
  while (i < count) {
    const std::uint64_t g = (k0 + i) / groups.size;
    const std::uint64_t run = std::min(count, (g + 1) * groups.size - k0) - i;
    const float sg = s[g];
    const std::int32_t zg = z[g];
    const std::int32_t* qi = q + i;
    float* oi = out + i;
    std::uint64_t j = 0;
    for (; j + kLanes <= run; j += kLanes)
      for (std::uint64_t l = 0; l < kLanes; ++l) oi[j + l] = sg * static_cast<float>(qi[j + l] - zg);
    for (; j < run; ++j) oi[j] = sg * static_cast<float>(qi[j] - zg);
    i += run;
  }
}

Result<const PartBytes*> checked_part(const LogicalTensor& t, std::span<const PartBytes> parts, std::string_view role,
                                      std::span<const DType> dtypes, const Shape& expected) {
  QLOAD_ASSIGN_OR_RETURN(const PartBytes* p, find_part(t, parts, role));
  QLOAD_TRY(check_part(t, *p, dtypes, expected));
  return p;
}

Result<const PartBytes*> checked_optional_part(const LogicalTensor& t, std::span<const PartBytes> parts,
                                               std::string_view role, std::span<const DType> dtypes,
                                               const Shape& expected) {
  for (const PartBytes& p : parts) {
    if (p.role != role) continue;
    QLOAD_TRY(check_part(t, p, dtypes, expected));
    return &p;
  }
  return static_cast<const PartBytes*>(nullptr);
}

Status check_output(const LogicalTensor& t, std::uint64_t row_begin, std::uint64_t row_end, std::size_t out_size) {
  const bool in_range = row_begin <= row_end && row_end <= t.rows;
  const Result<std::uint64_t> want = in_range ? checked_mul(row_end - row_begin, t.cols) : Result<std::uint64_t>(0);
  if (!in_range || !want.has_value() || *want != out_size)
    return fail(Error(Errc::kInvalidArgument, fmt::format("rows [{}, {}) of a [{}, {}] weight into {} floats",
                                                          row_begin, row_end, t.rows, t.cols, out_size))
                    .with_tensor(t.name));
  return {};
}

}  // namespace qload::formats::detail

#include "qload/formats/strided.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include <fmt/format.h>

namespace qload::formats {
namespace {

// `count` elements of `Bytes` each, `stride` bytes apart in `in`, to consecutive places in `out`
// (a constant size lets the compiler turn each memcpy into one load and store).
template <std::size_t Bytes>
void copy_strided(std::byte* out, const std::byte* in, std::uint64_t count, std::uint64_t stride) {
  for (std::uint64_t i = 0; i < count; ++i) std::memcpy(out + i * Bytes, in + i * stride, Bytes);
}

void copy_strided(std::byte* out, const std::byte* in, std::uint64_t count, std::uint64_t stride, std::size_t element) {
  switch (element) {
    case 1: return copy_strided<1>(out, in, count, stride);
    case 2: return copy_strided<2>(out, in, count, stride);
    case 4: return copy_strided<4>(out, in, count, stride);
    case 8: return copy_strided<8>(out, in, count, stride);
    default:
      for (std::uint64_t i = 0; i < count; ++i) std::memcpy(out + i * element, in + i * stride, element);
  }
}

}  // namespace

Result<std::uint64_t> strided_span_bytes(const Shape& shape, std::span<const std::uint64_t> strides, DType dtype) {
  if (strides.size() != shape.rank())
    return fail(Errc::kInvalidArgument, fmt::format("{} strides for a shape of rank {}", strides.size(), shape.rank()));
  std::uint64_t last = 0;  // the last element's index in the storage, from the first
  for (std::size_t d = 0; d < shape.rank(); ++d) {
    if (shape[d] == 0) return std::uint64_t{0};
    std::uint64_t reach = 0;
    if (__builtin_mul_overflow(shape[d] - 1, strides[d], &reach) || __builtin_add_overflow(last, reach, &last))
      return fail(Errc::kOverflow, "a strided view's extent exceeds 2^64 elements");
  }
  std::uint64_t bytes = 0;
  if (last == UINT64_MAX || __builtin_mul_overflow(last + 1, dtype_info(dtype).block_bytes, &bytes))
    return fail(Errc::kOverflow, "a strided view's extent exceeds 2^64 bytes");
  return bytes;
}

Status check_view_expansion(const Shape& shape, DType dtype, std::uint64_t span_bytes) {
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t dense, shape.nbytes(dtype));
  const std::uint64_t allowed =
      std::max(kViewExpansionFloorBytes, checked_mul(span_bytes, kMaxViewExpansion).value_or(UINT64_MAX));
  if (dense > allowed)
    return fail(Errc::kUnsupported,
                fmt::format("a view whose elements overlap (a stride of 0, as expand() makes): {} bytes row-major "
                            "from {} stored; qload gathers a view to at most {}x the bytes it spans or {} bytes "
                            "(save it with .contiguous())",
                            dense, span_bytes, kMaxViewExpansion, kViewExpansionFloorBytes));
  return {};
}

bool is_row_major(const Shape& shape, std::span<const std::uint64_t> strides) {
  if (strides.size() != shape.rank()) return false;
  std::uint64_t expected = 1;
  for (std::size_t d = shape.rank(); d-- > 0;) {
    if (shape[d] == 0) return true;  // no elements: any strides describe them
    if (shape[d] != 1 && strides[d] != expected) return false;
    expected *= shape[d];  // cannot overflow: the caller checked the element count
  }
  return true;
}

TensorEntry contiguous_entry(const TensorEntry& t) {
  TensorEntry dense = t;
  dense.strides.clear();
  dense.nbytes = t.shape.nbytes(t.dtype).value_or(0);
  return dense;
}

Status gather_strided(const TensorEntry& t, std::span<const std::byte> stored, std::span<std::byte> dense) {
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t span, strided_span_bytes(t.shape, t.strides, t.dtype));
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t want, t.shape.nbytes(t.dtype));
  if (stored.size() < span || dense.size() != want)
    return fail(Error(Errc::kInvalidArgument, fmt::format("gathering a strided view of {} bytes from {} into {}", span,
                                                          stored.size(), dense.size()))
                    .with_tensor(t.name));
  if (want == 0) return {};
  const std::size_t rank = t.shape.rank();
  const std::size_t element = dtype_info(t.dtype).block_bytes;
  if (rank == 0) {
    std::memcpy(dense.data(), stored.data(), element);
    return {};
  }
  // An odometer over the outer dims; the innermost dim is one memcpy when its stride is 1,
  // else one element at a time (a transposed weight: the slow path, taken only for views).
  // Each dim's step in bytes: a dim of one element never steps, so its stride (any value, even
  // one whose product with the element size wraps) is never multiplied; every other step is at
  // most the span, which strided_span_bytes checked fits in 64 bits, and so is every offset
  // (index[d] * step[d] <= (shape[d] - 1) * step[d] <= span).
  std::vector<std::uint64_t> step(rank, 0);
  for (std::size_t d = 0; d < rank; ++d)
    if (t.shape[d] > 1) step[d] = t.strides[d] * element;
  const std::uint64_t inner = t.shape[rank - 1];
  const std::uint64_t inner_stride = step[rank - 1];
  std::vector<std::uint64_t> index(rank - 1, 0);
  std::byte* out = dense.data();
  std::uint64_t from = 0;  // byte offset of the current row's first element in `stored`
  for (std::uint64_t rows = want / (inner * element); rows-- > 0;) {
    if (inner_stride == element || inner == 1)
      std::memcpy(out, stored.data() + from, inner * element);
    else
      copy_strided(out, stored.data() + from, inner, inner_stride, element);
    out += inner * element;
    for (std::size_t d = rank - 1; d-- > 0;) {  // next row: bump the odometer
      if (index[d] + 1 < t.shape[d]) {
        ++index[d];
        from += step[d];
        break;
      }
      from -= index[d] * step[d];
      index[d] = 0;
    }
  }
  return {};
}

}  // namespace qload::formats

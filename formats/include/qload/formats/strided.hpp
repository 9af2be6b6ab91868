// Tensors stored as strided views: PyTorch saves a transposed, stepped or expanded tensor as its
// storage plus strides, and torch.load hands back that view. qload reads the bytes the view
// spans as they are stored, then gathers them row-major (what `.contiguous()` gives).
#pragma once

#include <cstdint>
#include <span>

#include "qload/formats/catalog.hpp"
#include "qload/runtime/error.hpp"

namespace qload::formats {

// Bytes from a view's first element to the end of its last: 1 + sum((size - 1) * stride)
// elements, 0 when it has none. kOverflow past 2^64; kInvalidArgument when the ranks differ.
Result<std::uint64_t> strided_span_bytes(const Shape& shape, std::span<const std::uint64_t> strides, DType dtype);

// How far a view may expand when gathered: its row-major bytes (dtype x shape) may be at most
// kMaxViewExpansion times the bytes it spans, or kViewExpansionFloorBytes when that is more.
// Only a view whose elements overlap (a stride of 0, as `expand()` makes) can exceed 1x, and one
// float viewed as [32768, 16384] would otherwise become 2 GB from a 373-byte file.
inline constexpr std::uint64_t kMaxViewExpansion = 16;
inline constexpr std::uint64_t kViewExpansionFloorBytes = std::uint64_t{1} << 20;

// Checks the bound above for a view of `shape` and `strides` (each in elements) spanning
// `span_bytes`. kUnsupported past it, kOverflow when dtype x shape exceeds 2^64 bytes.
Status check_view_expansion(const Shape& shape, DType dtype, std::uint64_t span_bytes);

// Whether `strides` are the row-major strides of `shape` (a dim of size 1 may have any stride):
// such a view is an ordinary contiguous tensor.
bool is_row_major(const Shape& shape, std::span<const std::uint64_t> strides);

// `t` as a row-major tensor of the same name, dtype and shape (strides dropped, nbytes dtype x
// shape): what a strided tensor is once gathered.
TensorEntry contiguous_entry(const TensorEntry& t);

// Copies `t`'s elements in row-major order from `stored` (the bytes its view spans, from its
// first element) into `dense` (dtype x shape bytes). kInvalidArgument when a span is too short.
Status gather_strided(const TensorEntry& t, std::span<const std::byte> stored, std::span<std::byte> dense);

}  // namespace qload::formats

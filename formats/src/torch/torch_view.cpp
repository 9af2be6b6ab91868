#include "torch_view.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "../located_error.hpp"
#include "qload/formats/strided.hpp"
#include "qload/runtime/shape.hpp"

namespace qload::formats {
namespace {

// The strides as unsigned element counts, empty when they are row-major.
Result<std::vector<std::uint64_t>> view_strides(const PickledTensor& t, const Shape& shape, const std::string& path) {
  if (t.stride.size() != t.size.size())
    return fail(
        located(Errc::kCorrupt, fmt::format("{} strides for {} dims", t.stride.size(), t.size.size()), path, t.name));
  std::vector<std::uint64_t> strides;
  for (const std::int64_t stride : t.stride) {
    if (stride < 0)
      return fail(
          located(Errc::kCorrupt, fmt::format("a negative stride ({})", fmt::join(t.stride, ", ")), path, t.name));
    strides.push_back(static_cast<std::uint64_t>(stride));
  }
  if (is_row_major(shape, strides)) strides.clear();
  return strides;
}

// The bytes the tensor's elements span in its storage: dtype x shape when row-major, else from
// the first element to the end of the last, bounded in how far gathering it may expand.
Result<std::uint64_t> stored_bytes(const PickledTensor& t, const Shape& shape, std::span<const std::uint64_t> strides,
                                   const std::string& path) {
  const auto refuse = [&](const Error& e) { return fail(located(e.code(), e.message(), path, t.name)); };
  const auto numel = shape.numel();
  if (!numel) return refuse(numel.error());
  if (*numel > (std::uint64_t{1} << 62))
    return fail(located(Errc::kCorrupt, fmt::format("a tensor of {} elements", *numel), path, t.name));
  const auto dense = shape.nbytes(t.dtype);  // checked: 2^61 eight-byte elements do not wrap to 0
  if (!dense) return refuse(dense.error());
  if (strides.empty()) return *dense;
  const auto span = strided_span_bytes(shape, strides, t.dtype);
  if (!span) return refuse(span.error());
  if (const Status bounded = check_view_expansion(shape, t.dtype, *span); !bounded) return refuse(bounded.error());
  return *span;
}

}  // namespace

Result<TensorEntry> torch_tensor_entry(const PickledTensor& t, const ZipEntry& storage, std::uint32_t file,
                                       const std::string& path) {
  if (t.size.size() > kMaxTensorDims)
    return fail(
        located(Errc::kCorrupt,
                fmt::format("a tensor of {} dimensions (torch allows at most {})", t.size.size(), kMaxTensorDims), path,
                t.name));
  const DTypeInfo& info = dtype_info(t.dtype);
  if (info.block_elems != 1)
    return fail(located(Errc::kCorrupt, fmt::format("a torch tensor of {}", dtype_name(t.dtype)), path, t.name));
  const Shape shape(t.size);
  QLOAD_ASSIGN_OR_RETURN(std::vector<std::uint64_t> strides, view_strides(t, shape, path));
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t bytes, stored_bytes(t, shape, strides, path));
  TensorEntry entry{.name = t.name,
                    .file = file,
                    .offset = storage.data_offset,
                    .nbytes = bytes,
                    .dtype = t.dtype,
                    .shape = shape,
                    .strides = std::move(strides)};
  if (bytes == 0) return entry;  // no elements: nothing of the storage is read
  const auto first = checked_mul(t.storage_offset, info.block_bytes);
  const auto end = first ? checked_add(*first, bytes) : first;
  const auto at = first ? checked_add(storage.data_offset, *first) : first;
  if (!end || !at || *end > storage.size || *end > t.storage_bytes)
    return fail(located(Errc::kCorrupt,
                        fmt::format("the tensor's elements ({} bytes from element {}) run past its storage {} ({} "
                                    "bytes)",
                                    bytes, t.storage_offset, quote_name(storage.name), storage.size),
                        path, t.name, storage.data_offset));
  entry.offset = *at;
  return entry;
}

}  // namespace qload::formats

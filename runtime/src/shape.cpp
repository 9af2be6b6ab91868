#include "qload/runtime/shape.hpp"

#include <fmt/format.h>

namespace qload {

Result<std::uint64_t> checked_mul(std::uint64_t a, std::uint64_t b) {
  std::uint64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out))
    return fail(Errc::kOverflow, fmt::format("{} * {} does not fit in 64 bits", a, b));
  return out;
}

Result<std::uint64_t> checked_add(std::uint64_t a, std::uint64_t b) {
  std::uint64_t out = 0;
  if (__builtin_add_overflow(a, b, &out))
    return fail(Errc::kOverflow, fmt::format("{} + {} does not fit in 64 bits", a, b));
  return out;
}

Result<std::uint64_t> bytes_for_elements(DType dtype, std::uint64_t numel) {
  const DTypeInfo& info = dtype_info(dtype);
  if (numel % info.block_elems != 0)
    return fail(Errc::kCorrupt, fmt::format("{} elements are not a whole number of {} blocks of {}", numel, info.name,
                                            info.block_elems));
  return checked_mul(numel / info.block_elems, info.block_bytes);
}

Result<std::uint64_t> Shape::numel() const {
  // A zero anywhere makes the product 0, even if the dimensions before it overflow.
  for (std::uint64_t d : dims_)
    if (d == 0) return std::uint64_t{0};
  std::uint64_t n = 1;
  for (std::uint64_t d : dims_) {
    std::uint64_t next = 0;
    if (__builtin_mul_overflow(n, d, &next))
      return fail(Errc::kOverflow, fmt::format("element count of shape {} overflows", to_string()));
    n = next;
  }
  return n;
}

Result<std::uint64_t> Shape::nbytes(DType dtype) const {
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t n, numel());
  auto bytes = bytes_for_elements(dtype, n);
  if (!bytes)
    return fail(Error(bytes.error().code(),
                      fmt::format("shape {} of {}: {}", to_string(), dtype_name(dtype), bytes.error().message())));
  return *bytes;
}

std::vector<std::int64_t> Shape::contiguous_strides() const {
  std::vector<std::int64_t> strides(dims_.size());
  std::uint64_t step = 1;  // unsigned: the product past the outermost dimension may wrap unused
  for (std::size_t i = dims_.size(); i-- > 0;) {
    strides[i] = static_cast<std::int64_t>(step);
    step *= dims_[i];
  }
  return strides;
}

std::string Shape::to_string() const {
  return fmt::format("[{}]", fmt::join(dims_, ", "));
}

}  // namespace qload

// Tensor shapes with overflow-checked sizes.
//
// Dimensions come from untrusted headers, so every product is checked: numel() and nbytes()
// return kOverflow rather than wrapping, and nbytes() rejects element counts that are not a
// whole number of the dtype's blocks.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "qload/runtime/dtype.hpp"
#include "qload/runtime/error.hpp"

namespace qload {

class Shape {
 public:
  Shape() = default;  // a scalar: rank 0, one element
  Shape(std::initializer_list<std::uint64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<std::uint64_t> dims) : dims_(std::move(dims)) {}

  std::size_t rank() const noexcept { return dims_.size(); }
  std::span<const std::uint64_t> dims() const noexcept { return dims_; }
  std::uint64_t operator[](std::size_t i) const { return dims_.at(i); }

  // Product of the dimensions; 1 for a scalar, 0 if any dimension is 0.
  Result<std::uint64_t> numel() const;
  // Bytes needed to store this shape in `dtype`.
  Result<std::uint64_t> nbytes(DType dtype) const;
  // Row-major strides in elements (what DLPack and torch expect).
  std::vector<std::int64_t> contiguous_strides() const;

  std::string to_string() const;  // "[4096, 11008]"
  friend bool operator==(const Shape&, const Shape&) = default;

 private:
  std::vector<std::uint64_t> dims_;
};

// a * b and a + b on byte counts and offsets, or kOverflow.
Result<std::uint64_t> checked_mul(std::uint64_t a, std::uint64_t b);
Result<std::uint64_t> checked_add(std::uint64_t a, std::uint64_t b);
// Bytes for `numel` elements of `dtype`; kCorrupt if numel is not a whole number of blocks.
Result<std::uint64_t> bytes_for_elements(DType dtype, std::uint64_t numel);

}  // namespace qload

// The arithmetic every placement in a plan uses: overflow-checked offsets in an arena, and
// errors that name the tensor.
#pragma once

#include <cstdint>
#include <string>

#include "qload/formats/catalog.hpp"
#include "qload/runtime/dtype.hpp"
#include "qload/runtime/error.hpp"

namespace qload::scheduler::detail {

// An error naming the tensor, its file and its offset.
Error tensor_error(const formats::Catalog& catalog, const formats::TensorEntry& t, Errc code, std::string message);

// Bumps `cursor` to the next aligned offset for `bytes`, or kOverflow naming the arena.
Result<std::uint64_t> take(std::uint64_t& cursor, std::uint64_t bytes, std::uint64_t alignment,
                           const std::string& arena);

// F16, BF16 and F32: the dtypes a dtype policy converts between, and dequantization targets.
bool is_float_policy_dtype(DType d);

}  // namespace qload::scheduler::detail

#include "plan/plan_arith.hpp"

#include <fmt/format.h>

namespace qload::scheduler::detail {

namespace {

Result<std::uint64_t> align_up(std::uint64_t value, std::uint64_t alignment) {
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t bumped, checked_add(value, alignment - 1));
  return bumped & ~(alignment - 1);
}

}  // namespace

Error tensor_error(const formats::Catalog& catalog, const formats::TensorEntry& t, Errc code, std::string message) {
  std::string path = t.file < catalog.files.size() ? catalog.files[t.file].path : std::string();
  return Error(code, std::move(message)).with_offset(t.offset).with_tensor(t.name).with_file(std::move(path));
}

// Bumps `cursor` to the next aligned offset for `bytes`, or kOverflow naming the arena.
Result<std::uint64_t> take(std::uint64_t& cursor, std::uint64_t bytes, std::uint64_t alignment,
                           const std::string& arena) {
  auto offset = align_up(cursor, alignment);
  auto end = offset ? checked_add(*offset, bytes) : offset;
  if (!end) return fail(Errc::kOverflow, fmt::format("the {} arena would exceed 2^64 bytes", arena));
  cursor = *end;
  return *offset;
}

bool is_float_policy_dtype(DType d) {
  return d == DType::kF16 || d == DType::kBF16 || d == DType::kF32;
}

}  // namespace qload::scheduler::detail

#include "qload/runtime/dtype.hpp"

#include <array>
#include <cassert>

namespace qload {
namespace {

using K = DTypeKind;
constexpr std::array<DTypeInfo, 22> kTable{{
    {DType::kBool, "BOOL", K::kBool, 8, 1, 1},
    {DType::kU8, "U8", K::kUnsigned, 8, 1, 1},
    {DType::kI8, "I8", K::kSigned, 8, 1, 1},
    {DType::kI16, "I16", K::kSigned, 16, 1, 2},
    {DType::kU16, "U16", K::kUnsigned, 16, 1, 2},
    {DType::kI32, "I32", K::kSigned, 32, 1, 4},
    {DType::kU32, "U32", K::kUnsigned, 32, 1, 4},
    {DType::kI64, "I64", K::kSigned, 64, 1, 8},
    {DType::kU64, "U64", K::kUnsigned, 64, 1, 8},
    {DType::kF16, "F16", K::kFloat, 16, 1, 2},
    {DType::kBF16, "BF16", K::kFloat, 16, 1, 2},
    {DType::kF32, "F32", K::kFloat, 32, 1, 4},
    {DType::kF64, "F64", K::kFloat, 64, 1, 8},
    {DType::kC64, "C64", K::kComplex, 64, 1, 8},  // two F32 parts
    {DType::kF8_E4M3, "F8_E4M3", K::kFloat, 8, 1, 1},
    {DType::kF8_E5M2, "F8_E5M2", K::kFloat, 8, 1, 1},
    {DType::kF8_E8M0, "F8_E8M0", K::kFloat, 8, 1, 1},
    {DType::kF8_E4M3FNUZ, "F8_E4M3FNUZ", K::kFloat, 8, 1, 1},
    {DType::kF8_E5M2FNUZ, "F8_E5M2FNUZ", K::kFloat, 8, 1, 1},
    {DType::kF4, "F4", K::kFloat, 4, 2, 1},            // e2m1, two per byte
    {DType::kF6_E2M3, "F6_E2M3", K::kFloat, 6, 4, 3},  // four per three bytes
    {DType::kF6_E3M2, "F6_E3M2", K::kFloat, 6, 4, 3},
}};

constexpr bool table_in_enum_order() {
  for (std::size_t i = 0; i < kTable.size(); ++i)
    if (static_cast<std::size_t>(kTable[i].dtype) != i) return false;
  return true;
}
static_assert(table_in_enum_order(), "dtype table must follow the enum order");

constexpr bool blocks_match_bits() {
  for (const auto& d : kTable)
    if (std::uint64_t{d.bits} * d.block_elems != std::uint64_t{d.block_bytes} * 8) return false;
  return true;
}
static_assert(blocks_match_bits(), "bits * block_elems must equal 8 * block_bytes");

}  // namespace

std::span<const DTypeInfo> all_dtypes() noexcept {
  return kTable;
}

const DTypeInfo& dtype_info(DType dtype) noexcept {
  const auto i = static_cast<std::size_t>(dtype);
  assert(i < kTable.size());
  return kTable[i];
}

std::optional<DType> parse_dtype(std::string_view name) noexcept {
  for (const auto& d : kTable)
    if (d.name == name) return d.dtype;
  return std::nullopt;
}

}  // namespace qload

// Element types of stored and loaded tensors.
//
// Every type is described as "blocks": `block_elems` elements stored in `block_bytes` bytes.
// Plain types are blocks of one element (F32: 1 element in 4 bytes); sub-byte types are the
// smallest whole-byte group (F4: 2 elements in 1 byte, F6: 4 elements in 3 bytes); GGML
// quantized types slot in later as real blocks (Q4_0: 32 elements in 18 bytes) without a
// second size rule. A tensor's byte size is numel / block_elems * block_bytes, and numel must
// be a whole number of blocks.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace qload {

enum class DType : std::uint8_t {
  kBool,
  kU8,
  kI8,
  kI16,
  kU16,
  kI32,
  kU32,
  kI64,
  kU64,
  kF16,
  kBF16,
  kF32,
  kF64,
  kC64,
  kF8_E4M3,
  kF8_E5M2,
  kF8_E8M0,
  kF8_E4M3FNUZ,
  kF8_E5M2FNUZ,
  kF4,
  kF6_E2M3,
  kF6_E3M2,
};

enum class DTypeKind : std::uint8_t { kBool, kUnsigned, kSigned, kFloat, kComplex };

struct DTypeInfo {
  DType dtype;
  std::string_view name;  // the safetensors spelling ("BF16", "F8_E4M3", ...)
  DTypeKind kind;
  std::uint16_t bits;  // bits per element (for complex: both parts together)
  std::uint32_t block_elems;
  std::uint32_t block_bytes;
};

// The table of every dtype, in enum order.
std::span<const DTypeInfo> all_dtypes() noexcept;
const DTypeInfo& dtype_info(DType dtype) noexcept;
inline std::string_view dtype_name(DType dtype) noexcept {
  return dtype_info(dtype).name;
}
// Parses the safetensors spelling (exact, case-sensitive, as the format requires).
std::optional<DType> parse_dtype(std::string_view name) noexcept;

}  // namespace qload

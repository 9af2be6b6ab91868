// ggml's tensor types as GGUF stores them (ggml.h's enum ggml_type): blocks of `block_elems`
// elements in `block_bytes` bytes; `dtype` where the type is a plain one qload has.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "qload/runtime/dtype.hpp"

namespace qload::formats::gguf {

struct GgmlType {
  std::uint32_t id;
  std::string_view name;
  std::uint32_t block_elems;
  std::uint32_t block_bytes;
  std::optional<DType> dtype;  // a plain type qload loads as is
};

// The type with this id, or null (unknown, or removed from ggml: 4, 5, 31-33, 36-38).
const GgmlType* find_ggml_type(std::uint32_t id) noexcept;

}  // namespace qload::formats::gguf

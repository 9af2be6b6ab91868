// Sharded safetensors checkpoints: the `*.safetensors.index.json` file (the transformers
// convention) that maps every tensor name to the shard file holding it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>

#include "qload/runtime/error.hpp"

namespace qload::formats {

struct SafetensorsIndex {
  std::map<std::string, std::string> weight_map;  // tensor name -> shard file name
  std::optional<std::uint64_t> total_size;        // metadata.total_size, when present
};

// The largest index file read (a 100k-tensor index is about 10 MB).
inline constexpr std::uint64_t kMaxIndexBytes = 64ull << 20;

// Parses index JSON: an object with `weight_map` (object of string -> string, required) and
// an optional `metadata` object whose optional `total_size` is a non-negative integer. Other
// keys are ignored. Duplicate keys anywhere are rejected (kCorrupt), as is every shard name
// that could leave the model directory (empty, absolute, a `..` component, a backslash or a
// NUL byte). `path` labels errors.
Result<SafetensorsIndex> parse_safetensors_index(std::span<const std::byte> json, const std::string& path);

}  // namespace qload::formats

// The model geometry config.json records (Hugging Face names), for plans that depend on it:
// head-aware tensor-parallel splits and pipeline stages.
#pragma once

#include <cstdint>
#include <optional>

#include "qload/formats/catalog.hpp"
#include "qload/runtime/error.hpp"

namespace qload::formats {

struct ModelGeometry {
  std::optional<std::uint64_t> layers;    // num_hidden_layers
  std::optional<std::uint64_t> hidden;    // hidden_size
  std::optional<std::uint64_t> heads;     // num_attention_heads
  std::optional<std::uint64_t> kv_heads;  // num_key_value_heads (defaults to heads)
  std::optional<std::uint64_t> head_dim;  // head_dim (defaults to hidden / heads)
};

// From catalog.config_json (all fields unset when there is none). kCorrupt naming config.json
// and the key for a value that is not a positive integer.
Result<ModelGeometry> read_geometry(const Catalog& catalog);

}  // namespace qload::formats

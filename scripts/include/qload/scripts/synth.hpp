// Synthetic llama-shaped checkpoints for tests, demos and benchmarks: config.json, sharded
// safetensors files and (for more than one shard) a model.safetensors.index.json, exactly
// like a Hugging Face export. Deterministic: the same options give the same bytes, because
// every element is a function of (seed, tensor index, element index), not of a stream.
#pragma once

#include <cstdint>
#include <string>

#include "qload/runtime/dtype.hpp"
#include "qload/runtime/error.hpp"

namespace qload::scripts {

struct SynthOptions {
  std::uint32_t layers = 2;
  std::uint32_t hidden = 256;
  std::uint32_t intermediate = 688;
  std::uint32_t vocab = 1024;
  std::uint32_t heads = 4;
  std::uint32_t kv_heads = 2;
  std::uint32_t shards = 2;
  DType dtype = DType::kBF16;  // kBF16, kF16 or kF32
  std::uint64_t seed = 0;
};

struct SynthReport {
  std::uint64_t tensors = 0;
  std::uint64_t bytes = 0;  // tensor bytes over all shards
  std::uint32_t files = 0;
};

// Checks the options (hidden divisible by heads, heads by kv_heads, a float dtype, ...).
Status validate(const SynthOptions& options);

// Writes the checkpoint into directory `out` (created if missing; existing files of the
// same names are replaced atomically).
Result<SynthReport> synthesize(const std::string& out, const SynthOptions& options);

}  // namespace qload::scripts

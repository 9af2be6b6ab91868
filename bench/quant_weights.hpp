// The quantized weights qload_quant_bench decodes: one random [N, K] weight per scheme qload
// reads, built with the formats layer's own encoders (quant_pack.hpp; formats::quantize for FP8
// and int8) exactly as a producer stores it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qload/formats/quant.hpp"
#include "qload/formats/quant_codec.hpp"
#include "qload/runtime/dtype.hpp"
#include "qload/runtime/error.hpp"
#include "qload/runtime/shape.hpp"

namespace qload::bench::quant {

using Bytes = std::vector<std::byte>;

inline constexpr std::uint64_t kGroupSize = 128;  // every grouped scheme, as the common checkpoints use

struct OwnedPart {
  std::string role;
  DType dtype = DType::kU8;
  Shape shape;
  Bytes bytes;
};

// One quantized weight: its geometry and its stored parts, as a checkpoint holds them.
struct Weight {
  std::string name;  // the scheme, as printed
  formats::LogicalTensor t;
  std::vector<OwnedPart> parts;

  void add(std::string role, DType dtype, Shape shape, Bytes bytes) {
    parts.push_back({std::move(role), dtype, std::move(shape), std::move(bytes)});
  }
  std::vector<formats::PartBytes> views() const {
    std::vector<formats::PartBytes> v;
    for (const OwnedPart& p : parts) v.push_back({p.role, p.dtype, p.shape, p.bytes});
    return v;
  }
  std::uint64_t stored_bytes() const {
    std::uint64_t sum = 0;
    for (const OwnedPart& p : parts) sum += p.bytes.size();
    return sum;
  }
};

// `n` x `k` random bf16 values (a weight before quantizing), seeded.
Bytes random_bf16(std::uint64_t n, std::uint64_t k, std::uint64_t seed);

// One [n, k] weight in every scheme (or those whose name contains `only`).
Result<std::vector<Weight>> make_weights(std::uint64_t n, std::uint64_t k, std::string_view only);

}  // namespace qload::bench::quant

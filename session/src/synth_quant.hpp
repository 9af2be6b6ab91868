// Quantized synthetic checkpoints (synth.hpp, SynthOptions::quant): which weights are
// quantized, the config.json quantization_config, and the stored parts written in place of each
// linear weight. Private to the scripts layer; synth.cpp drives it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "qload/formats/safetensors_writer.hpp"
#include "qload/runtime/error.hpp"
#include "qload/runtime/shape.hpp"
#include "qload/session/synth.hpp"

namespace qload::session::detail {

// splitmix64 of a counter: random access to a deterministic sequence. Every synthesized value
// is mix(stream ^ mix(element index)) for a per-tensor (and per-part) stream.
inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// o.quant empty, or a known name whose geometry constraints the sizes meet (kInvalidArgument
// naming the constraint and the offending size otherwise).
Status validate_quant(const SynthOptions& o);

// config.json's quantization_config for o.quant (o.quant must be valid and not empty).
nlohmann::json quantization_config(const SynthOptions& o);

// Whether --quant replaces the tensor `name` (the attention and MLP projection weights).
bool is_quantized_linear(std::string_view name);

// The stored tensors written instead of the linear weight `name` of shape [N, K], in file order.
// `stream` seeds the tensor's values; `original` fills the unquantized weight (o.dtype), the one
// synth writes without quantization (the FP8 schemes quantize it). Each part's fill computes all
// of the weight's parts on its first call and drops its own bytes after its last chunk, so at
// most one weight's parts are in memory while the writer streams them in order. The fills
// share state: not thread-safe, call them from one thread (the writer does).
Result<std::vector<formats::WriterTensor>> quantized_parts(const SynthOptions& o, const std::string& name,
                                                           const Shape& shape, std::uint64_t stream,
                                                           formats::TensorFill original);

}  // namespace qload::session::detail

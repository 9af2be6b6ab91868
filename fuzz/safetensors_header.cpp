// libFuzzer target: a whole safetensors file held in memory (length field, header JSON, data).
// Limits are small so the fuzzer explores validation, not allocation.
#include <cstddef>
#include <cstdint>
#include <span>

#include "qload/formats/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const qload::formats::SafetensorsLimits limits{.max_header_bytes = 1 << 20, .max_tensors = 4096};
  const auto bytes = std::as_bytes(std::span(data, size));
  (void)qload::formats::parse_safetensors_bytes(bytes, "fuzz.safetensors", limits);
  return 0;
}

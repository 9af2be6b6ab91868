// libFuzzer target: model.safetensors.index.json text.
#include <cstddef>
#include <cstdint>
#include <span>

#include "qload/formats/safetensors_index.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)qload::formats::parse_safetensors_index(std::as_bytes(std::span(data, size)), "model.safetensors.index.json");
  return 0;
}

// libFuzzer target: a whole GGUF file held in memory (header, key-values, tensor infos, data).
// Every count and length is bounded by the input's size, so nothing large is allocated.
#include <cstddef>
#include <cstdint>
#include <span>

#include "qload/formats/gguf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = std::as_bytes(std::span(data, size));
  (void)qload::formats::parse_gguf_bytes(bytes, size, "fuzz.gguf");
  return 0;
}

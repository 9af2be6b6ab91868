// The CPU loop of the FP4 decoders (MXFP4, NVFP4): per group, the 16 values its codes can take
// (Scheme::level(code) times Scheme::scale, the kernel's own products: dequantize_element.hpp)
// go into a table once, and each byte of codes becomes two lookups.
#pragma once

#include <cstdint>

#include "dequantize_element.hpp"

namespace qload::formats::detail {

template <typename Scheme>
void decode_fp4_rows(const DequantArgs& a, std::uint64_t group, std::uint64_t row_begin, std::uint64_t row_end,
                     float* y) {
  float table[16];
  for (std::uint64_t n = row_begin; n < row_end; ++n) {
    const std::uint8_t* row = a.codes + n * (a.cols / 2);
    for (std::uint64_t g = 0; g < a.groups; ++g) {
      const float s = Scheme::scale(a, n, g);
      for (unsigned c = 0; c < 16; ++c) table[c] = element::mul_rn(Scheme::level(c), s);
      const std::uint8_t* pairs = row + g * (group / 2);
      for (std::uint64_t j = 0; j < group / 2; ++j) {
        y[0] = table[pairs[j] & 0xFu];
        y[1] = table[pairs[j] >> 4u];
        y += 2;
      }
    }
  }
}

}  // namespace qload::formats::detail

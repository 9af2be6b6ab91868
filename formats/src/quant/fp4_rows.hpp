// The CPU loop of the FP4 decoders (MXFP4, NVFP4): per group, the 16 values its codes can take
// (Scheme::level(code) times Scheme::scale, the kernel's own products: dequantize_element.hpp)
// go into a table once, and each byte of codes becomes two lookups (nibble_lookup.hpp).
#pragma once

#include <cstdint>

#include "dequantize_element.hpp"
#include "nibble_lookup.hpp"

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
      lookup_nibbles_interleaved(table, row + g * (group / 2), group / 2, y);
      y += group;
    }
  }
}

}  // namespace qload::formats::detail

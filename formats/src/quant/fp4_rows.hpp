// The CPU loop of the FP4 decoders (MXFP4, NVFP4): per group, the 16 values its codes can take
// (Scheme::level(code) times Scheme::scale, the kernel's own products: dequantize_element.hpp)
// go into a table once, and each byte of codes becomes two lookups (nibble_lookup.hpp).
#pragma once

#include <algorithm>
#include <cstdint>

#include "dequantize_element.hpp"
#include "nibble_lookup.hpp"

namespace qload::formats::detail {

template <typename Scheme>
void decode_fp4_rows(const DequantArgs& a, std::uint64_t group, std::uint64_t row_begin, std::uint64_t row_end,
                     float* y) {
  constexpr std::uint64_t kGroupsAtOnce = 64;  // 4 KiB of tables per lookup call
  float tables[16 * kGroupsAtOnce];
  for (std::uint64_t n = row_begin; n < row_end; ++n) {
    const std::uint8_t* row = a.codes + n * (a.cols / 2);
    for (std::uint64_t g0 = 0; g0 < a.groups; g0 += kGroupsAtOnce) {
      const std::uint64_t count = std::min(kGroupsAtOnce, a.groups - g0);
      for (std::uint64_t g = 0; g < count; ++g) {
        const float s = Scheme::scale(a, n, g0 + g);
        for (unsigned c = 0; c < 16; ++c) tables[16 * g + c] = element::mul_rn(Scheme::level(c), s);
      }
      lookup_groups_interleaved(tables, row + g0 * (group / 2), count, group / 2, y);
      y += count * group;
    }
  }
}

}  // namespace qload::formats::detail

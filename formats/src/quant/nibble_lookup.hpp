// Bytes of two 4-bit codes expanded through a table of the 16 values a group's codes can take
// (the FP4 and IQ4 decoders build one per group): the inner loop of every table-driven decoder.
// On x86-64 CPUs with AVX2 each 8 bytes become 16 floats in a few permutes; elsewhere a plain
// loop. The values are the table's either way, so the choice never changes a bit.
#pragma once

#include <cstddef>
#include <cstdint>

namespace qload::formats::detail {

// Groups of codes, each through its own table: group g's `group_bytes` bytes of codes (from
// codes + g * group_bytes) expand interleaved (MXFP4 as gpt-oss stores it, NVFP4: element 2j is
// the low nibble of byte j, 2j + 1 its high nibble) through tables + 16 * g into 2 * group_bytes
// floats at y + 2 * g * group_bytes. One call for many groups keeps the call and the CPU check
// off the inner loop (NVFP4's groups are 8 bytes).
void lookup_groups_interleaved(const float* tables, const std::uint8_t* codes, std::size_t groups,
                               std::size_t group_bytes, float* y);

// Split (GGML blocks): y[j] = table[low nibble of codes[j]], y[count + j] = table[high nibble].
void lookup_nibbles_split(const float* table, const std::uint8_t* codes, std::size_t count, float* y);

// Whether the AVX2 loops run on this CPU (the benchmark and tests say which path they measured).
bool nibble_lookup_uses_avx2() noexcept;

}  // namespace qload::formats::detail

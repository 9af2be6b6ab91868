// The table lookups of the FP4 / IQ4 decoders (quant/nibble_lookup.hpp): the AVX2 loops (when
// this CPU has AVX2) give exactly what indexing the table byte by byte gives, in both element
// orders, for every count (whole vectors, tails, nothing).
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <vector>

#include "quant/nibble_lookup.hpp"

using namespace qload::formats::detail;

TEST_CASE("nibble lookup: both orders equal indexing the table, on every count", "[quant]") {
  // (One group here; the next test gives each of several groups its own table.)
  INFO((nibble_lookup_uses_avx2() ? "AVX2 loops" : "scalar loops"));
  std::mt19937 rng(7);
  float table[16];
  for (float& t : table) t = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 8.0f;
  table[8] = -0.0f;  // a sign that only a bitwise comparison sees
  std::vector<std::uint8_t> codes(70);
  for (std::uint8_t& c : codes) c = static_cast<std::uint8_t>(rng());
  for (std::size_t count = 0; count <= 64; ++count) {
    INFO("count " << count);
    std::vector<float> interleaved(2 * count + 1, 7.0f), split(2 * count + 1, 7.0f);
    std::vector<float> want_interleaved(2 * count + 1, 7.0f), want_split(2 * count + 1, 7.0f);
    const std::uint8_t* in = codes.data() + count % 5;  // unaligned starts too
    lookup_groups_interleaved(table, in, 1, count, interleaved.data());
    lookup_nibbles_split(table, in, count, split.data());
    for (std::size_t j = 0; j < count; ++j) {
      want_interleaved[2 * j] = table[in[j] & 15];
      want_interleaved[2 * j + 1] = table[in[j] >> 4];
      want_split[j] = table[in[j] & 15];
      want_split[count + j] = table[in[j] >> 4];
    }
    // Bitwise, and nothing written past 2 * count.
    CHECK(std::memcmp(interleaved.data(), want_interleaved.data(), interleaved.size() * 4) == 0);
    CHECK(std::memcmp(split.data(), want_split.data(), split.size() * 4) == 0);
  }
}

TEST_CASE("nibble lookup: each group of an interleaved run goes through its own table", "[quant]") {
  constexpr std::size_t kGroups = 5, kBytes = 8;  // NVFP4's 16-element groups
  std::vector<float> tables(16 * kGroups);
  for (std::size_t i = 0; i < tables.size(); ++i) tables[i] = static_cast<float>(i);  // unique per group
  std::vector<std::uint8_t> codes(kGroups * kBytes);
  for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<std::uint8_t>(i * 37 + 11);
  std::vector<float> got(2 * codes.size());
  lookup_groups_interleaved(tables.data(), codes.data(), kGroups, kBytes, got.data());
  for (std::size_t g = 0; g < kGroups; ++g)
    for (std::size_t j = 0; j < kBytes; ++j) {
      const std::uint8_t c = codes[g * kBytes + j];
      CHECK(got[2 * (g * kBytes + j)] == tables[16 * g + (c & 15)]);
      CHECK(got[2 * (g * kBytes + j) + 1] == tables[16 * g + (c >> 4)]);
    }
}

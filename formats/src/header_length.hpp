// The first rules of a safetensors file, shared by the in-memory and the pread paths: the
// 8-byte little-endian header length N, checked before anything of size N is allocated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "qload/formats/safetensors.hpp"
#include "qload/runtime/error.hpp"

namespace qload::formats {

inline constexpr std::uint64_t kLengthFieldBytes = 8;

// kTruncated when the file cannot even hold the length field.
Status check_length_field(std::uint64_t file_size, const std::string& path);

// N > the limit: kCorrupt; 8 + N overflowing: kOverflow; 8 + N past the file: kTruncated.
Status check_header_length(std::uint64_t header_bytes, std::uint64_t file_size, const std::string& path,
                           const SafetensorsLimits& limits);

inline std::uint64_t decode_le64(std::span<const std::byte, 8> bytes) noexcept {
  std::uint64_t value = 0;
  for (std::size_t i = 8; i-- > 0;) value = (value << 8) | std::to_integer<std::uint64_t>(bytes[i]);
  return value;
}

}  // namespace qload::formats

// Hand-built GGUF files for the formats tests: a builder that writes exactly the fields it is
// given, so every validation rule can be broken on purpose, and a valid-file helper.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "support/scratch.hpp"

namespace qload::testing {

class GgufBytes {
 public:
  GgufBytes& u32(std::uint32_t v) { return raw(&v, 4); }
  GgufBytes& u64(std::uint64_t v) { return raw(&v, 8); }
  GgufBytes& str(std::string_view s) {
    u64(s.size());
    return raw(s.data(), s.size());
  }
  GgufBytes& raw(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    bytes.insert(bytes.end(), b, b + n);
    return *this;
  }
  // magic, version, tensor count, key-value count
  GgufBytes& header(std::uint64_t tensors, std::uint64_t kvs, std::uint32_t version = 3) {
    return raw("GGUF", 4).u32(version).u64(tensors).u64(kvs);
  }
  GgufBytes& kv_u32(std::string_view key, std::uint32_t v) { return str(key).u32(4).u32(v); }
  GgufBytes& kv_str(std::string_view key, std::string_view v) { return str(key).u32(8).str(v); }
  // A tensor info: name, dims (innermost first), ggml type, offset in the data section.
  GgufBytes& tensor(std::string_view name, std::vector<std::uint64_t> ne, std::uint32_t type, std::uint64_t offset) {
    str(name).u32(static_cast<std::uint32_t>(ne.size()));
    for (const std::uint64_t n : ne) u64(n);
    return u32(type).u64(offset);
  }
  GgufBytes& pad_to(std::size_t alignment) {
    while (bytes.size() % alignment != 0) bytes.push_back(std::byte{0});
    return *this;
  }
  GgufBytes& data(const std::vector<std::byte>& d) {
    bytes.insert(bytes.end(), d.begin(), d.end());
    return *this;
  }

  std::vector<std::byte> bytes;
};

}  // namespace qload::testing

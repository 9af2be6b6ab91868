// Shared helpers for the formats tests: hand-built safetensors files (so every validation rule
// can be broken on purpose), and checks that an error names the right file, tensor and offset.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qload/formats/catalog.hpp"
#include "qload/formats/driver.hpp"
#include "qload/runtime/error.hpp"
#include "support/scratch.hpp"

namespace qload::testing {

inline std::vector<std::byte> bytes_of(std::string_view text) {
  std::vector<std::byte> out(text.size());
  if (!text.empty()) std::memcpy(out.data(), text.data(), text.size());
  return out;
}

inline void append(std::vector<std::byte>& out, const std::vector<std::byte>& more) {
  out.insert(out.end(), more.begin(), more.end());
}

inline std::vector<std::byte> le64(std::uint64_t value) {
  std::vector<std::byte> out(8);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>(value >> (8 * i));
  return out;
}

// A safetensors file: the length field (N = header.size() unless `declared` overrides it), the
// header text verbatim, then `data`.
inline std::vector<std::byte> safetensors_bytes(std::string_view header, const std::vector<std::byte>& data = {},
                                                std::optional<std::uint64_t> declared = std::nullopt) {
  std::vector<std::byte> out = le64(declared.value_or(header.size()));
  append(out, bytes_of(header));
  append(out, data);
  return out;
}

inline std::vector<std::byte> zeros(std::size_t n) {
  return std::vector<std::byte>(n);
}

// Writes a hand-built file into `dir` and returns its path.
inline std::string write_safetensors_file(const ScratchDir& dir, const std::string& name, std::string_view header,
                                          const std::vector<std::byte>& data = {},
                                          std::optional<std::uint64_t> declared = std::nullopt) {
  const std::string path = dir.file(name);
  write_file(path, safetensors_bytes(header, data, declared));
  return path;
}

inline void write_text(const std::string& path, std::string_view text) {
  write_file(path, bytes_of(text));
}

inline const formats::FormatDriver& safetensors() {
  const formats::FormatDriver* driver = formats::find_driver("safetensors");
  REQUIRE(driver != nullptr);
  return *driver;
}

// What an error must say. Empty / nullopt fields are not checked.
struct ExpectedError {
  Errc code;
  std::string message_has;
  std::string file;
  std::optional<std::string> tensor;  // "" = no tensor may be named
  std::optional<std::uint64_t> offset;
};

template <typename T>
void check_error(const Result<T>& result, const ExpectedError& want) {
  REQUIRE_FALSE(result.has_value());
  const Error& error = result.error();
  INFO(error.to_string());
  CHECK(error.code() == want.code);
  CHECK_THAT(error.message(), Catch::Contains(want.message_has));
  if (!want.file.empty()) {
    REQUIRE(error.file().has_value());
    CHECK(std::string(*error.file()) == want.file);
  }
  if (want.tensor && want.tensor->empty()) CHECK_FALSE(error.tensor().has_value());
  if (want.tensor && !want.tensor->empty()) {
    REQUIRE(error.tensor().has_value());
    CHECK(std::string(*error.tensor()) == *want.tensor);
  }
  if (want.offset) {
    REQUIRE(error.offset().has_value());
    CHECK(*error.offset() == *want.offset);
  }
}

}  // namespace qload::testing

namespace qload::testing {

// One header entry: "name":{"dtype":..,"shape":..,"data_offsets":[b,e]} (shape given as JSON).
inline std::string entry(std::string_view name, std::string_view dtype, std::string_view shape, std::uint64_t begin,
                         std::uint64_t end) {
  return "\"" + std::string(name) + "\":{\"dtype\":\"" + std::string(dtype) + "\",\"shape\":" + std::string(shape) +
         ",\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(end) + "]}";
}

// Absolute file offset of relative data offset `rel` in a file whose header text is `header`.
inline std::uint64_t data_at(std::string_view header, std::uint64_t rel) {
  return 8 + header.size() + rel;
}

// Offset in the file of the first occurrence of `needle` in `header`.
inline std::uint64_t header_pos(std::string_view header, std::string_view needle) {
  const auto at = header.find(needle);
  REQUIRE(at != std::string_view::npos);
  return 8 + at;
}

}  // namespace qload::testing

#include "qload/formats/safetensors_writer.hpp"

namespace qload::testing {

struct ShardTensor {
  std::string name;
  DType dtype = DType::kU8;
  Shape shape;
};

// The seed of tensor i's bytes in files written by write_shard.
inline std::uint64_t sample_seed(std::size_t i) {
  return i + 7;
}

// Writes a valid safetensors file with the writer; tensor i holds
// random_bytes(nbytes, sample_seed(i)).
inline void write_shard(const std::string& path, const std::vector<ShardTensor>& tensors) {
  std::vector<std::vector<std::byte>> data;
  std::vector<formats::WriterTensor> views;
  for (const ShardTensor& t : tensors) data.push_back(random_bytes(*t.shape.nbytes(t.dtype), sample_seed(data.size())));
  for (std::size_t i = 0; i < tensors.size(); ++i)
    views.push_back({.name = tensors[i].name, .dtype = tensors[i].dtype, .shape = tensors[i].shape, .bytes = data[i]});
  const Status written = formats::write_safetensors(path, views);
  if (!written) FAIL(written.error().to_string());
}

}  // namespace qload::testing

// Stage one of safetensors header validation: the JSON itself. A SAX handler checks the
// header's structure while nlohmann's lexer reads it, so no DOM is built for a 100 MB header
// and the first problem stops the parse: the root is an object; `__metadata__` is an object of
// string -> string; every other key is a tensor whose value is an object with exactly
// `dtype` (a known spelling), `shape` (non-negative integers) and `data_offsets` ([BEGIN,
// END]); no key repeats anywhere.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "qload/runtime/dtype.hpp"
#include "qload/runtime/error.hpp"

namespace qload::formats {

struct RawTensor {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<std::uint64_t> dims;
  std::uint64_t begin = 0;  // data_offsets, relative to the data buffer
  std::uint64_t end = 0;
  std::uint64_t name_offset = 0;  // absolute file offset just past the tensor's name
};

struct RawHeader {
  std::vector<RawTensor> tensors;  // in document order
  std::map<std::string, std::string> metadata;
};

struct RawHeaderContext {
  const std::string& path;        // labels errors
  std::uint64_t json_offset = 8;  // file offset of the header's first byte
  std::uint64_t max_tensors = 0;  // entries beyond this are kUnsupported
};

// Parses header JSON that is already known to be UTF-8 and to start with '{'. Never throws.
Result<RawHeader> parse_raw_header(std::string_view json, const RawHeaderContext& context);

}  // namespace qload::formats

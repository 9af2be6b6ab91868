// Writes safetensors files the way the reference writer lays them out: 8-byte length, compact
// JSON header padded with spaces to a multiple of 8, then the tensors back to back in the
// order given (no alignment padding between them, as in the format).
//
// Output is atomic: bytes go to a hidden temp file beside `path`, which is fsynced and renamed
// over `path`; on any failure the temp file is removed and `path` is left untouched.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "qload/runtime/dtype.hpp"
#include "qload/runtime/error.hpp"
#include "qload/runtime/shape.hpp"

namespace qload::formats {

// Fills `out` with the tensor's bytes [offset, offset + out.size()); called with consecutive
// chunks from offset 0, so a large tensor never needs one contiguous buffer.
using TensorFill = std::function<Status(std::uint64_t offset, std::span<std::byte> out)>;

struct WriterTensor {
  std::string name;  // valid UTF-8, unique, not "__metadata__"
  DType dtype = DType::kU8;
  Shape shape;
  // The bytes in one span (must be exactly shape.nbytes(dtype) long) unless `fill` is set.
  std::span<const std::byte> bytes;
  TensorFill fill;
};

struct WriterOptions {
  std::map<std::string, std::string> metadata;  // __metadata__; omitted when empty...
  bool empty_metadata_entry = false;            // ...unless set: `"__metadata__":{}`, as the
                                                // reference writes for an empty dict
  std::size_t chunk_bytes = 4u << 20;           // buffer size handed to TensorFill callbacks
};

// The 8-byte length and the padded JSON header that write_safetensors emits for `tensors`
// (`empty_metadata_entry` as in WriterOptions). Metadata keys are written sorted. kInvalidArgument for a bad name, a
// duplicate, a byte span of the wrong length or a header above the format's 100,000,000-byte limit; kOverflow/kCorrupt
// from the shapes.
Result<std::vector<std::byte>> build_safetensors_header(std::span<const WriterTensor> tensors,
                                                        const std::map<std::string, std::string>& metadata,
                                                        bool empty_metadata_entry = false);

// Writes `tensors` to `path` atomically (see above). Errors name the file and, for data
// problems, the tensor and the file offset.
Status write_safetensors(const std::string& path, std::span<const WriterTensor> tensors,
                         const WriterOptions& options = {});

}  // namespace qload::formats

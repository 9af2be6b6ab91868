// Move-only owner of a private file mapping (mmap mode's zero-copy tensors point into it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "qload/runtime/error.hpp"

namespace qload {

class MappedRegion {
 public:
  MappedRegion() = default;
  MappedRegion(MappedRegion&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  MappedRegion& operator=(MappedRegion&& other) noexcept;
  MappedRegion(const MappedRegion&) = delete;
  MappedRegion& operator=(const MappedRegion&) = delete;
  ~MappedRegion() { reset(); }

  // Maps bytes [offset, offset + bytes) of the open file `fd` copy-on-write: reads see the
  // file, and a write (a framework's in-place op on a tensor it was handed; qload itself
  // treats the bytes as read-only) changes a private copy of its page, never the file, instead
  // of faulting, as torch's and safetensors' own mappings do. `offset` must be a
  // multiple of the page size (kInvalidArgument otherwise). Nothing past offset + bytes is
  // mapped beyond the kernel's rounding of the last page; the caller checks the file is at
  // least that long (a mapping past the end of a file faults with SIGBUS on access).
  static Result<MappedRegion> map(int fd, std::uint64_t offset, std::uint64_t bytes, const std::string& path);

  const std::byte* data() const noexcept { return data_; }
  std::uint64_t size() const noexcept { return bytes_; }
  // Asks the kernel to start reading the whole region in (asynchronous readahead).
  void will_need() const noexcept;
  void reset() noexcept;

 private:
  std::byte* data_ = nullptr;
  std::uint64_t bytes_ = 0;
};

}  // namespace qload

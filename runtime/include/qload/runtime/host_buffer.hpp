// Move-only owner of an aligned block of host memory.
//
// Staging slots and host arenas are large and long-lived, so they are mapped directly
// (anonymous mmap) rather than taken from malloc: the alignment can be anything up to a huge
// page, blocks of 2 MiB or more are advised to use transparent huge pages (first touch of
// 4 KiB pages runs at ~0.27 GB/s on these machines, huge pages ~2 GB/s), and freeing returns
// the memory to the OS at once.
#pragma once

#include <cstddef>
#include <span>
#include <utility>

#include "qload/runtime/error.hpp"

namespace qload {

class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(HostBuffer&& other) noexcept
      : map_(std::exchange(other.map_, nullptr)),
        map_bytes_(std::exchange(other.map_bytes_, 0)),
        data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)) {}
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer() { reset(); }

  // `size` bytes whose start is a multiple of `alignment` (a power of two; at least the page
  // size is always given). Zero-filled. kOutOfMemory if the mapping fails.
  static Result<HostBuffer> allocate(std::size_t size, std::size_t alignment = 4096);

  std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::span<std::byte> span() const noexcept { return {data_, size_}; }
  bool empty() const noexcept { return size_ == 0; }
  void reset() noexcept;

 private:
  void* map_ = nullptr;        // what mmap returned (may start before data_)
  std::size_t map_bytes_ = 0;  // length of that mapping
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace qload

// Free device memory, for tests that show a load gives every device byte back. Module loading
// is made eager (eager_module_loading.cpp) so a first kernel launch does not look like a leak;
// what is left is the driver's own bookkeeping, which it takes and gives back in 2 MiB pages
// at moments of its choosing (seen on an H100, driver 580: one page more after a first load's
// streams, one page fewer after an out-of-memory error, two pages under compute-sanitizer).
// So figures within two pages count as the same, and every test that checks "every byte went
// back" allocates well over that.
#pragma once

#include <catch2/catch.hpp>

#include <cstddef>

#include "qload/runtime/cuda_memory.hpp"

namespace qload::testing {

inline std::size_t free_bytes(int device) {
  auto info = cuda::memory_info(device);
  REQUIRE(info);
  return info->free_bytes;
}

inline constexpr std::size_t kDriverSlack = std::size_t{4} << 20;

// |a - b|, to compare with kDriverSlack: CHECK(free_bytes_moved(free_bytes(0), before) <= kDriverSlack).
inline std::size_t free_bytes_moved(std::size_t a, std::size_t b) {
  return a > b ? a - b : b - a;
}

}  // namespace qload::testing

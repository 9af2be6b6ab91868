// Free device memory, for tests that show a load gives every device byte back (exact figures:
// see eager_module_loading.cpp for why they are stable).
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

}  // namespace qload::testing

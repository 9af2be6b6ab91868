// Plain C++ interface of cuda_self_test_kernel.cu (nvcc compiles that file with its own
// C++ dialect, so nothing from the C++23 side crosses this header).
#pragma once

#include <cstddef>

namespace qload::detail {

// Fills a device buffer with a kernel, copies it back and checks it. Returns 0 on success,
// otherwise non-zero with a message in `message`.
int run_cuda_self_test_kernel(int device, char* message, std::size_t message_size);

}  // namespace qload::detail

// Plain C++ interface of convert.cu (nvcc compiles that file with its own C++ dialect, so
// nothing from the C++23 side, Result and Error included, crosses this header).
#pragma once

#include <cstddef>
#include <cstdint>

namespace qload::formats::detail {

enum class ConvertPair : int {
  kIdentity,  // a device-to-device copy of count * element_bytes
  kF32ToBF16,
  kF32ToF16,
  kBF16ToF32,
  kF16ToF32,
  kF16ToBF16,
  kBF16ToF16,
};

// Enqueues the conversion of `count` elements on `stream` (a cudaStream_t of `device`);
// `element_bytes` is the input element size (used by kIdentity). The caller has checked
// pointers, alignment and sizes. Makes `device` current for the launch and leaves it so.
// Returns 0 once enqueued, otherwise non-zero with a message.
int launch_convert(ConvertPair pair, const void* in, void* out, std::uint64_t count, std::size_t element_bytes,
                   int device, void* stream, char* message, std::size_t message_size);

}  // namespace qload::formats::detail

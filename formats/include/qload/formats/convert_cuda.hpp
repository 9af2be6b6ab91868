// The CUDA side of convert.hpp: the same conversions as kernels on a stream, bit-identical to
// the CPU functions. Present in every build; without CUDA compiled in, kUnsupported.
#pragma once

#include <cstddef>
#include <cstdint>

#include "qload/runtime/cuda_memory.hpp"
#include "qload/runtime/dtype.hpp"
#include "qload/runtime/error.hpp"

namespace qload::formats {

// Enqueues the conversion of `count` elements from device memory `in` (dtype `from`) to
// device memory `out` (dtype `to`) on `stream`; returns once launched (check errors with the
// stream's synchronize or a later event). `in` and `out` must not overlap. kInvalidArgument
// for a pair is_convertible() rejects; kDevice if the launch fails.
Status convert_on_device(const std::byte* in, DType from, std::byte* out, DType to, std::uint64_t count,
                         const cuda::Stream& stream);

}  // namespace qload::formats

// Between DLPack and qload, for the C ABI: dtypes both ways, a caller's qload_destination as
// the scheduler's Destination (what DLPack can say but qload cannot fill refused, naming the
// tensor), and a loaded tensor described as a DLTensor.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "qload/qload.h"
#include "qload/runtime/device.hpp"
#include "qload/runtime/dtype.hpp"
#include "qload/runtime/error.hpp"
#include "qload/session/load.hpp"

namespace qload::capi {

// DLPack's code for a dtype, or nullopt where DLPack has none (the packed F4 and F6).
std::optional<DLDataType> dlpack_dtype(DType d);
std::optional<DType> dtype_of_dlpack(DLDataType d);

// kInvalidArgument / kUnsupported naming the tensor for a target qload cannot fill: an unknown
// device or dtype, no shape or data, rows that are not contiguous or overlap.
Result<scheduler::Destination> destination_of(const qload_destination& d);

// `t` as a DLTensor over `shape` and `strides` (which must outlive it; strides empty for a
// compact tensor): data aligned down to 256 bytes, the rest in byte_offset.
Result<DLTensor> dl_tensor_of(const scheduler::DeviceTensor& t, std::span<std::int64_t> shape,
                              std::span<std::int64_t> strides);
// `t`'s strides for DLPack: empty when compact row-major (every tensor qload places; a caller's
// destination with gaps between its rows is not).
std::vector<std::int64_t> strides_of(const scheduler::DeviceTensor& t);
std::vector<std::int64_t> shape_of(const scheduler::DeviceTensor& t);

// `t` (with `shape`, shape_of(t)) as a DLPack tensor the caller owns: its deleter releases
// `owner` (what keeps t.data alive: a model, a streamed tensor). kUnsupported for dtypes DLPack
// cannot name (the packed F4 and F6).
Result<DLManagedTensorVersioned*> export_dlpack(const scheduler::DeviceTensor& t, std::shared_ptr<const void> owner,
                                                std::vector<std::int64_t> shape);

// qload_tensor_info of `t`, whose strings and `shape` must outlive it.
qload_tensor_info info_of(const scheduler::DeviceTensor& t, const std::vector<std::int64_t>& shape);

}  // namespace qload::capi

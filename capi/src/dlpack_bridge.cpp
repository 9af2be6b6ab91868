// The C ABI's side of DLPack: dtypes both ways, a caller's DLTensor as a scheduler destination,
// and a loaded tensor as a DLTensor (its shape and strides kept by the caller).
#include "dlpack_bridge.hpp"

#include <cstdint>

#include <fmt/format.h>

namespace qload::capi {

// DLPack's code for a dtype, or nullopt where DLPack has none.
std::optional<DLDataType> dlpack_dtype(DType d) {
  const auto of = [](DLDataTypeCode code, int bits) {
    return DLDataType{static_cast<std::uint8_t>(code), static_cast<std::uint8_t>(bits), 1};
  };
  switch (d) {
    case DType::kBool: return of(kDLBool, 8);
    case DType::kU8: return of(kDLUInt, 8);
    case DType::kU16: return of(kDLUInt, 16);
    case DType::kU32: return of(kDLUInt, 32);
    case DType::kU64: return of(kDLUInt, 64);
    case DType::kI8: return of(kDLInt, 8);
    case DType::kI16: return of(kDLInt, 16);
    case DType::kI32: return of(kDLInt, 32);
    case DType::kI64: return of(kDLInt, 64);
    case DType::kF16: return of(kDLFloat, 16);
    case DType::kBF16: return of(kDLBfloat, 16);
    case DType::kF32: return of(kDLFloat, 32);
    case DType::kF64: return of(kDLFloat, 64);
    case DType::kC64: return of(kDLComplex, 64);
    case DType::kF8_E4M3: return of(kDLFloat8_e4m3fn, 8);  // safetensors' F8_E4M3 is torch's e4m3fn
    case DType::kF8_E5M2: return of(kDLFloat8_e5m2, 8);
    case DType::kF8_E4M3FNUZ: return of(kDLFloat8_e4m3fnuz, 8);
    case DType::kF8_E5M2FNUZ: return of(kDLFloat8_e5m2fnuz, 8);
    case DType::kF8_E8M0: return of(kDLFloat8_e8m0fnu, 8);
    case DType::kF4:
    case DType::kF6_E2M3:
    case DType::kF6_E3M2: return std::nullopt;  // sub-byte: packed, no DLPack layout agreed here
  }
  return std::nullopt;
}

std::optional<DType> dtype_of_dlpack(DLDataType d) {
  for (const DTypeInfo& info : all_dtypes()) {
    const std::optional<DLDataType> dl = dlpack_dtype(info.dtype);
    if (dl && dl->code == d.code && dl->bits == d.bits && dl->lanes == d.lanes) return info.dtype;
  }
  return std::nullopt;
}

// A qload_destination as the scheduler takes it: kInvalidArgument / kUnsupported naming the
// tensor for what DLPack can say but qload cannot fill (a strided target, an unknown device).
Result<scheduler::Destination> destination_of(const qload_destination& d) {
  if (d.tensor == nullptr) return fail(Errc::kInvalidArgument, "qload_load_into: a destination's tensor is NULL");
  const auto error = [&](Errc code, std::string message) {
    return fail(Error(code, "qload_load_into: " + std::move(message)).with_tensor(d.tensor));
  };
  const DLTensor& t = d.target;
  scheduler::Destination out;
  switch (t.device.device_type) {
    case kDLCPU:
    case kDLCUDAHost: out.device = Device{}; break;
    case kDLCUDA: out.device = Device{.kind = Device::Kind::kCuda, .index = t.device.device_id}; break;
    default:
      return error(Errc::kUnsupported, fmt::format("a target on DLPack device type {} (CPU, CUDA host or CUDA only)",
                                                   static_cast<int>(t.device.device_type)));
  }
  const std::optional<DType> dtype = dtype_of_dlpack(t.dtype);
  if (!dtype)
    return error(Errc::kUnsupported, fmt::format("a target of DLPack dtype code {} with {} bits and {} lanes",
                                                 t.dtype.code, t.dtype.bits, t.dtype.lanes));
  out.dtype = *dtype;
  if (t.ndim < 0 || (t.ndim > 0 && t.shape == nullptr)) return error(Errc::kInvalidArgument, "the target has no shape");
  std::vector<std::uint64_t> dims;
  for (std::int32_t i = 0; i < t.ndim; ++i) {
    if (t.shape[i] < 0) return error(Errc::kInvalidArgument, fmt::format("the target's dimension {} is negative", i));
    dims.push_back(static_cast<std::uint64_t>(t.shape[i]));
  }
  out.shape = Shape(dims);
  QLOAD_ASSIGN_OR_RETURN(out.bytes, out.shape->nbytes(out.dtype));
  if (t.strides != nullptr) {
    // Row-major with every row of dim 0 compact (a dimension of size 1 may have any stride);
    // the rows themselves may be further apart: some columns of a larger tensor.
    std::int64_t expected = 1;
    for (std::int32_t i = t.ndim - 1; i >= 1; --i) {
      if (t.shape[i] != 1 && t.strides[i] != expected)
        return error(Errc::kUnsupported,
                     "the target's rows are not contiguous and row-major (strides): only the stride of dimension 0 "
                     "may be larger than compact");
      expected *= t.shape[i];
    }
    if (t.ndim >= 1 && t.shape[0] > 1 && t.strides[0] != expected) {
      const DTypeInfo& element = dtype_info(*dtype);
      if (t.strides[0] < expected || t.strides[0] % element.block_elems != 0)
        return error(Errc::kUnsupported,
                     fmt::format("the target's dimension 0 has stride {}: at least {} (its rows would overlap) and a "
                                 "whole number of {}-element blocks",
                                 t.strides[0], expected, element.block_elems));
      QLOAD_ASSIGN_OR_RETURN(out.row_pitch, checked_mul(static_cast<std::uint64_t>(t.strides[0]) / element.block_elems,
                                                        element.block_bytes));
    }
  }
  if (t.data == nullptr && out.bytes > 0) return error(Errc::kInvalidArgument, "the target's data is NULL");
  out.address = reinterpret_cast<std::uintptr_t>(t.data) + t.byte_offset;
  if (d.row_range_count > 0) {
    if (d.row_ranges == nullptr) return error(Errc::kInvalidArgument, "row_ranges is NULL");
    if (d.region_dim != -1)
      return error(Errc::kInvalidArgument, "a destination takes a region or row ranges, not both");
    for (std::size_t i = 0; i < d.row_range_count; ++i)
      out.rows.emplace_back(d.row_ranges[2 * i], d.row_ranges[2 * i + 1]);
  }
  if (d.region_dim < -1) return error(Errc::kInvalidArgument, fmt::format("region_dim {} (-1, 0 or 1)", d.region_dim));
  if (d.region_dim >= 0)
    out.region = scheduler::TensorRegion{
        .dim = static_cast<std::uint32_t>(d.region_dim), .begin = d.region_begin, .end = d.region_end};
  return out;
}

// The DLPack description of `t`, with `shape` and `strides` (which must outlive it; strides
// empty for a compact tensor) as its shape and strides.
Result<DLTensor> dl_tensor_of(const scheduler::DeviceTensor& t, std::span<std::int64_t> shape,
                              std::span<std::int64_t> strides) {
  const std::optional<DLDataType> dtype = dlpack_dtype(t.dtype);
  if (!dtype)
    return fail(
        Error(Errc::kUnsupported, fmt::format("DLPack has no dtype for {}", dtype_name(t.dtype))).with_tensor(t.name));
  auto device = parse_device(t.device);
  if (!device) return fail(std::move(device.error()).with_tensor(t.name));
  DLTensor d{};
  // DLPack's convention: `data` aligned to 256 bytes, the rest in byte_offset.
  const auto address = reinterpret_cast<std::uintptr_t>(t.data);
  d.data = reinterpret_cast<void*>(address & ~std::uintptr_t{255});
  d.byte_offset = address & 255;
  d.device = device->is_cuda() ? DLDevice{kDLCUDA, device->index} : DLDevice{kDLCPU, 0};
  d.ndim = static_cast<std::int32_t>(shape.size());
  d.dtype = *dtype;
  d.shape = shape.data();
  d.strides = strides.empty() ? nullptr : strides.data();
  return d;
}

// `t`'s strides for DLPack: empty when compact row-major (every tensor qload places; a caller's
// destination with gaps between its rows is not).
std::vector<std::int64_t> strides_of(const scheduler::DeviceTensor& t) {
  if (t.strides.empty() || t.strides == t.shape.contiguous_strides()) return {};
  return t.strides;
}

std::vector<std::int64_t> shape_of(const scheduler::DeviceTensor& t) {
  std::vector<std::int64_t> shape;
  for (const std::uint64_t d : t.shape.dims()) shape.push_back(static_cast<std::int64_t>(d));
  return shape;
}

namespace {

// What an exported DLPack tensor owns: its tensor's memory (shared) and its shape and strides.
struct Exported {
  DLManagedTensorVersioned managed{};
  std::shared_ptr<const void> owner;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;  // empty: compact (DLPack's NULL)
};

void delete_exported(DLManagedTensorVersioned* self) {
  delete static_cast<Exported*>(self->manager_ctx);
}

}  // namespace

Result<DLManagedTensorVersioned*> export_dlpack(const scheduler::DeviceTensor& t, std::shared_ptr<const void> owner,
                                                std::vector<std::int64_t> shape) {
  auto exported = std::make_unique<Exported>();
  exported->owner = std::move(owner);
  exported->shape = std::move(shape);
  exported->strides = strides_of(t);
  DLManagedTensorVersioned& m = exported->managed;
  QLOAD_ASSIGN_OR_RETURN(m.dl_tensor, dl_tensor_of(t, exported->shape, exported->strides));
  m.version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  m.manager_ctx = exported.get();
  m.deleter = delete_exported;
  m.flags = t.writable ? 0 : DLPACK_FLAG_BITMASK_READ_ONLY;
  return &exported.release()->managed;
}

qload_tensor_info info_of(const scheduler::DeviceTensor& t, const std::vector<std::int64_t>& shape) {
  return qload_tensor_info{.name = t.name.c_str(),
                           .dtype = dtype_name(t.dtype).data(),
                           .ndim = static_cast<std::int32_t>(t.shape.rank()),
                           .shape = shape.data(),
                           .device = t.device.c_str(),
                           .nbytes = t.nbytes,
                           .read_only = t.writable ? 0 : 1};
}

}  // namespace qload::capi

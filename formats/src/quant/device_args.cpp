// DequantArgs from a checked LogicalTensor (quant_cuda.cpp launches them; a host test checks
// them element by element with dequantize_element.hpp against the CPU decoders).
#include "device_args.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "../gguf/ggml_types.hpp"
#include "decoders.hpp"
#include "qload/formats/quant_pack.hpp"

namespace qload::formats::detail {
namespace {

DeviceFloat device_float(DType dtype) {
  return dtype == DType::kF32 ? DeviceFloat::kF32 : dtype == DType::kBF16 ? DeviceFloat::kBF16 : DeviceFloat::kF16;
}

// The parts by role: the host copy (checked) and its device twin.
class DeviceParts {
 public:
  DeviceParts(const LogicalTensor& t, std::span<const PartBytes> host, std::span<const std::byte* const> device)
      : t_(t), host_(host), device_(device) {}

  const PartBytes* host(std::string_view role) const {
    for (const PartBytes& p : host_)
      if (p.role == role) return &p;
    return nullptr;
  }
  // The device pointer of `role` (nullptr when absent), checked against its element size.
  Result<const void*> device(std::string_view role) const {
    for (std::size_t i = 0; i < host_.size(); ++i) {
      if (host_[i].role != role) continue;
      const std::byte* p = device_[i];
      const std::uint64_t align = dtype_info(host_[i].dtype).block_bytes;
      if (p == nullptr && !host_[i].bytes.empty())
        return fail(
            Error(Errc::kInvalidArgument, fmt::format("part '{}': null device pointer", role)).with_tensor(t_.name));
      if (reinterpret_cast<std::uintptr_t>(p) % align != 0)
        return fail(
            Error(Errc::kInvalidArgument, fmt::format("part '{}': device pointer {} is not aligned to its {} "
                                                      "elements",
                                                      role, static_cast<const void*>(p), dtype_name(host_[i].dtype)))
                .with_tensor(t_.name));
      return static_cast<const void*>(p);
    }
    return static_cast<const void*>(nullptr);
  }

 private:
  const LogicalTensor& t_;
  std::span<const PartBytes> host_;
  std::span<const std::byte* const> device_;
};

DeviceIndex index_type(const PartBytes* part) {
  if (part == nullptr) return DeviceIndex::kNone;
  return part->dtype == DType::kI64 ? DeviceIndex::kI64 : DeviceIndex::kI32;
}

// Columns per group the way make_group_map counts them (0 or more than K is one group); the
// group count is packed_shapes' (which honours QuantParams::groups).
void set_groups(DequantArgs& a, std::uint64_t cols, std::uint64_t group_size, std::uint64_t groups) {
  a.group_size = group_size == 0 || group_size > cols ? std::max<std::uint64_t>(cols, 1) : group_size;
  a.groups = groups;
}

DeviceScaleIndex scale_index(ScaleLayout layout) {
  switch (layout) {
    case ScaleLayout::kTensor: return DeviceScaleIndex::kTensor;
    case ScaleLayout::kRow: return DeviceScaleIndex::kRow;
    case ScaleLayout::kBlock: return DeviceScaleIndex::kBlock;
    case ScaleLayout::kGroup: break;
    case ScaleLayout::kColumn: break;  // FP8 only, whose kernel reads the scale grid instead
  }
  return DeviceScaleIndex::kGroup;
}

// Points `field` at the device copy of part `role` (nullptr when the part is absent).
template <typename T>
Status bind(const DeviceParts& parts, std::string_view role, const T*& field) {
  QLOAD_ASSIGN_OR_RETURN(const void* pointer, parts.device(role));
  field = static_cast<const T*>(pointer);
  return {};
}

Status describe_integer(const LogicalTensor& t, const DeviceParts& parts, DequantArgs& a) {
  QLOAD_ASSIGN_OR_RETURN(const PackedShapes shapes, packed_shapes(t));
  const QuantParams& p = t.params;
  a.bits = p.bits;
  a.weight_words = shapes.weight.rank() == 2 ? shapes.weight[1] : 0;
  switch (p.scheme) {
    case QuantScheme::kGptq:
      a.scheme = DeviceScheme::kGptq;
      QLOAD_TRY(bind(parts, "qweight", a.weight));
      QLOAD_TRY(bind(parts, "qzeros", a.zeros));
      QLOAD_TRY(bind(parts, "scales", a.scales));
      QLOAD_TRY(bind(parts, "g_idx", a.g_idx));
      a.scale_type = device_float(parts.host("scales")->dtype);
      a.g_idx_type = index_type(parts.host("g_idx"));
      a.zero_words = shapes.zeros[1];
      a.gptq_v1 = p.gptq_version == 1;
      a.gptq_v1_word_offset = a.gptq_v1 && p.gptq_v1_whole_word ? gptq_v1_word_offset(p.bits) : 0;
      set_groups(a, t.cols, p.group_size, shapes.groups);
      return {};
    case QuantScheme::kAwqGemm:
    case QuantScheme::kAwqGemv:
      a.scheme = p.scheme == QuantScheme::kAwqGemm ? DeviceScheme::kAwqGemm : DeviceScheme::kAwqGemv;
      QLOAD_TRY(bind(parts, "qweight", a.weight));
      QLOAD_TRY(bind(parts, "qzeros", a.zeros));
      QLOAD_TRY(bind(parts, "scales", a.scales));
      a.scale_type = device_float(parts.host("scales")->dtype);
      a.zero_words = shapes.zeros[1];
      a.scale_stride = shapes.scales[1];
      set_groups(a, t.cols, p.group_size, shapes.groups);
      return {};
    case QuantScheme::kCtPacked:
    case QuantScheme::kCtInt: {
      const bool packed = p.scheme == QuantScheme::kCtPacked;
      a.scheme = packed ? DeviceScheme::kCtPacked : DeviceScheme::kCtInt;
      if (packed) {
        QLOAD_TRY(bind(parts, "weight_packed", a.weight));
        QLOAD_TRY(bind(parts, "weight_zero_point", a.zeros));
        if (!shapes.has_zeros) a.zeros = nullptr;  // the decoder ignores a stray one too
      } else {
        QLOAD_TRY(bind(parts, "weight", a.codes));
        QLOAD_TRY(bind(parts, "weight_zero_point", a.int_zeros));
        const PartBytes* zp = parts.host("weight_zero_point");
        a.int_zeros_i8 = zp != nullptr && zp->dtype == DType::kI8;
      }
      QLOAD_TRY(bind(parts, "weight_scale", a.scales));
      QLOAD_TRY(bind(parts, "weight_g_idx", a.g_idx));
      a.scale_type = device_float(parts.host("weight_scale")->dtype);
      a.g_idx_type = index_type(parts.host("weight_g_idx"));
      a.dense = p.dense_bitstream;
      a.scale_index = scale_index(p.scale_layout);
      set_groups(a, t.cols, p.scale_layout == ScaleLayout::kGroup ? p.group_size : 0, shapes.groups);
      return {};
    }
    case QuantScheme::kFp8:
    case QuantScheme::kGgml:
    case QuantScheme::kMxfp4:
    case QuantScheme::kNvfp4:
    case QuantScheme::kBnb4:
    case QuantScheme::kBnb8: break;
  }
  return fail(Errc::kInternal, "describe_integer: not an integer scheme");
}

Status describe_fp8(const LogicalTensor& t, std::span<const PartBytes> host, const DeviceParts& parts, DequantArgs& a) {
  QLOAD_ASSIGN_OR_RETURN(const Fp8Parts fp8, checked_fp8_parts(t, host));
  a.scheme = DeviceScheme::kFp8;
  QLOAD_TRY(bind(parts, "weight", a.codes));
  QLOAD_TRY(bind(parts, fp8.scale->role, a.scales));
  a.code = fp8.weight->dtype == DType::kF8_E5M2 ? DeviceCode::kE5M2 : DeviceCode::kE4M3;
  a.scale_type = device_float(fp8.scale->dtype);
  a.rows_per_scale = fp8.grid.rows_per_scale;
  a.cols_per_scale = fp8.grid.cols_per_scale;
  a.scale_cols = fp8.grid.scale_cols;
  return {};
}

// GGML blocks: the checks (check_quantized_parts) made the rows whole blocks of a known type.
Status describe_ggml(const LogicalTensor& t, const DeviceParts& parts, DequantArgs& a) {
  const gguf::GgmlType* type = gguf::find_ggml_type(t.params.ggml_type);
  if (type == nullptr) return fail(Errc::kInternal, "describe_ggml: unknown ggml type");
  a.scheme = DeviceScheme::kGgml;
  a.ggml_type = type->id;
  a.row_bytes = t.cols / type->block_elems * type->block_bytes;
  return bind(parts, "blocks", a.codes);
}

Status check_request(const LogicalTensor& t, std::span<const PartBytes> host_parts,
                     std::span<const std::byte* const> device_parts, DType out_dtype, const std::byte* out) {
  if (out_dtype != DType::kF32 && out_dtype != DType::kBF16 && out_dtype != DType::kF16)
    return fail(Errc::kInvalidArgument, fmt::format("dequantize to {}: only F32, BF16, F16", dtype_name(out_dtype)));
  if (host_parts.size() != device_parts.size())
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("{} host parts but {} device parts", host_parts.size(), device_parts.size()))
                    .with_tensor(t.name));
  if (out == nullptr || reinterpret_cast<std::uintptr_t>(out) % dtype_info(out_dtype).block_bytes != 0)
    return fail(Error(Errc::kInvalidArgument, "dequantize on a device: the output pointer is null or misaligned")
                    .with_tensor(t.name));
  return {};
}

}  // namespace

Result<DequantArgs> describe_dequantize(const LogicalTensor& tensor, std::span<const PartBytes> host_parts,
                                        std::span<const std::byte* const> device_parts, std::uint64_t row_begin,
                                        std::uint64_t row_end, DType out_dtype, std::byte* out) {
  if (row_begin > row_end || row_end > tensor.rows)
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("rows [{}, {}) outside the weight's {}", row_begin, row_end, tensor.rows))
                    .with_tensor(tensor.name));
  QLOAD_TRY(check_request(tensor, host_parts, device_parts, out_dtype, out));
  QLOAD_TRY(check_quantized_parts(tensor, host_parts));
  const DeviceParts parts(tensor, host_parts, device_parts);
  DequantArgs args;
  args.rows = tensor.rows;
  args.cols = tensor.cols;
  if (tensor.params.scheme == QuantScheme::kFp8) {
    QLOAD_TRY(describe_fp8(tensor, host_parts, parts, args));
  } else if (tensor.params.scheme == QuantScheme::kGgml) {
    QLOAD_TRY(describe_ggml(tensor, parts, args));
  } else if (tensor.params.scheme == QuantScheme::kMxfp4) {
    const Mxfp4Roles roles = mxfp4_roles(host_parts);
    args.scheme = DeviceScheme::kMxfp4;
    args.groups = tensor.cols / 32;
    QLOAD_TRY(bind(parts, roles.blocks, args.codes));
    QLOAD_TRY(bind(parts, roles.scales, args.scale_codes));
  } else if (tensor.params.scheme == QuantScheme::kBnb4) {
    args.scheme = DeviceScheme::kBnb4;
    args.group_size = tensor.params.group_size;
    args.nested_block = tensor.params.nested_block;
    args.nested_offset = tensor.params.nested_offset;
    QLOAD_TRY(bind(parts, "weight", args.codes));
    QLOAD_TRY(bind(parts, "quant_map", args.code_map));
    if (args.nested_block == 0) {
      QLOAD_TRY(bind(parts, "absmax", args.absmax));
    } else {
      QLOAD_TRY(bind(parts, "absmax", args.scale_codes));
      QLOAD_TRY(bind(parts, "nested_quant_map", args.nested_map));
      QLOAD_TRY(bind(parts, "nested_absmax", args.nested_absmax));
    }
  } else if (tensor.params.scheme == QuantScheme::kBnb8) {
    args.scheme = DeviceScheme::kBnb8;
    QLOAD_TRY(bind(parts, "weight", args.codes));
    QLOAD_TRY(bind(parts, "SCB", args.absmax));
  } else if (tensor.params.scheme == QuantScheme::kNvfp4) {
    args.scheme = DeviceScheme::kNvfp4;
    args.groups = tensor.cols / 16;
    QLOAD_ASSIGN_OR_RETURN(const Nvfp4Global global, nvfp4_global(tensor, host_parts));
    QLOAD_TRY(bind(parts, global.packed, args.codes));
    QLOAD_TRY(bind(parts, "weight_scale", args.scale_codes));
    args.global_scale = global.value;
    args.global_multiplies = global.multiplies;
  } else {
    QLOAD_TRY(describe_integer(tensor, parts, args));
  }
  args.row_begin = row_begin;
  args.row_end = row_end;
  args.out = out;
  args.out_type = device_float(out_dtype);
  return args;
}

}  // namespace qload::formats::detail

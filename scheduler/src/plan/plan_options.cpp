// PlanOptions: names, parsing and the checks a plan's options must pass before planning.
#include "qload/scheduler/plan_options.hpp"

#include <bit>

#include <fmt/format.h>

#include "plan/plan_arith.hpp"
#include "qload/io/reader.hpp"

namespace qload::scheduler {

using detail::is_float_policy_dtype;

std::string_view load_mode_name(LoadMode mode) noexcept {
  switch (mode) {
    case LoadMode::kRead: return "read";
    case LoadMode::kMmap: return "mmap";
    case LoadMode::kAuto: return "auto";
  }
  return "?";
}

std::string_view placement_name(Placement placement) noexcept {
  switch (placement) {
    case Placement::kRoundRobin: return "round-robin";
    case Placement::kByLayer: return "by-layer";
  }
  return "?";
}

Result<Placement> parse_placement(std::string_view text) {
  if (text == "round-robin") return Placement::kRoundRobin;
  if (text == "by-layer") return Placement::kByLayer;
  return fail(Errc::kInvalidArgument, fmt::format("placement '{}' is not round-robin or by-layer", text));
}

Status PlanOptions::validate() const {
  if (devices.empty()) return fail(Errc::kInvalidArgument, "no destination device");
  for (std::size_t i = 0; i < devices.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (devices[i] == devices[j])
        return fail(Errc::kInvalidArgument, fmt::format("device {} is listed twice", devices[i].to_string()));
  if (mode == LoadMode::kMmap && (devices.size() != 1 || !devices.front().is_cpu()))
    return fail(Errc::kUnsupported, "mmap mode maps files for one cpu device only");
  if (repack && dequantize)
    return fail(Errc::kInvalidArgument, "repack keeps weights packed; it cannot be combined with dequantize");
  if (parallel.processes == 0 || parallel.process >= parallel.processes)
    return fail(Errc::kInvalidArgument,
                fmt::format("process {} of {}: not a process of the layout", parallel.process, parallel.processes));
  if (parallel.trivial() && parallel.processes > 1)
    return fail(Errc::kInvalidArgument,
                fmt::format("a layout of one device cannot be spread over {} processes", parallel.processes));
  if (mode == LoadMode::kMmap && !parallel.trivial())
    return fail(Errc::kUnsupported, "mmap mode maps files for one device: no parallel layout");
  if (mode == LoadMode::kMmap && (dtype || dequantize || quantize || repack || weight_policy))
    return fail(Errc::kInvalidArgument,
                "mmap mode cannot convert, dequantize or quantize (the tensors are the file's bytes)");
  if (region && (devices.size() != 1 || !parallel.trivial() || place))
    return fail(Errc::kUnsupported, "tensor regions are read for one device, with no parallel layout");
  if (region && (dequantize || quantize || repack || weight_policy))
    return fail(Errc::kUnsupported, "tensor regions are cut from stored tensors: nothing is decoded or quantized");
  if (!destinations.empty() && mode == LoadMode::kMmap)
    return fail(Errc::kUnsupported, "caller-owned destinations are filled in read mode, not mmap mode");
  if (!destinations.empty() && !parallel.trivial())
    return fail(Errc::kUnsupported,
                "caller-owned destinations are filled by one process without a parallel layout (give each rank "
                "its tensor regions instead)");
  if (destinations_only && destinations.empty())
    return fail(Errc::kInvalidArgument, "destinations_only without any destination would load nothing");
  if (dequantize && !is_float_policy_dtype(*dequantize))
    return fail(Errc::kInvalidArgument,
                fmt::format("dequantize to {}: only F16, BF16 and F32", dtype_name(*dequantize)));
  if (dtype && !is_float_policy_dtype(*dtype))
    return fail(Errc::kInvalidArgument,
                fmt::format("dtype policy {}: only F16, BF16 and F32 are conversion targets", dtype_name(*dtype)));
  if (dtype && chunk_bytes < 64)
    return fail(Errc::kInvalidArgument, "chunks under 64 bytes cannot carry whole elements for conversion");
  if (!std::has_single_bit(tensor_alignment))
    return fail(Errc::kInvalidArgument, fmt::format("tensor alignment {} is not a power of two", tensor_alignment));
  if (!std::has_single_bit(read_alignment))
    return fail(Errc::kInvalidArgument, fmt::format("read alignment {} is not a power of two", read_alignment));
  if (chunk_bytes == 0 || chunk_bytes > io::kMaxReadBytes)
    return fail(Errc::kInvalidArgument, fmt::format("chunk size {} is outside 1..{}", chunk_bytes, io::kMaxReadBytes));
  return {};
}

}  // namespace qload::scheduler

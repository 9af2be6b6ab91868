// LoadOptions from the settings table: the one place a resolved setting becomes a field of
// the I/O layer's, the staging pool's, the planner's or the executor's options.
#include <fmt/format.h>

#include "qload/scheduler/load.hpp"

namespace qload::scheduler {

Status LoadOptions::apply(const Settings& s) {
  QLOAD_ASSIGN_OR_RETURN(io.engine, io::parse_engine(s.io_engine));
  if (s.direct_io == "auto")
    io.direct = io::DirectMode::kAuto;
  else if (s.direct_io == "on")
    io.direct = io::DirectMode::kOn;
  else if (s.direct_io == "off")
    io.direct = io::DirectMode::kOff;
  else
    return fail(Errc::kInvalidArgument, fmt::format("direct_io '{}' is not auto, on or off", s.direct_io));
  if (s.load_mode == "read")
    plan.mode = LoadMode::kRead;
  else if (s.load_mode == "mmap")
    plan.mode = LoadMode::kMmap;
  else if (s.load_mode == "auto")
    plan.mode = LoadMode::kAuto;
  else
    return fail(Errc::kInvalidArgument, fmt::format("load_mode '{}' is not read, mmap or auto", s.load_mode));
  io.queue_depth = s.io_depth;
  staging.total_bytes = s.staging_bytes;
  // A read fills at most one slot, so the two move together: a smaller slot alone would leave
  // reads that do not fit it.
  staging.slot_bytes = plan.chunk_bytes = s.slot_bytes;
  reads_in_flight = s.reads_in_flight;
  cpu_workers = s.cpu_workers;
  copy_lanes = s.copy_lanes;
  if (s.digests == "auto")
    digests = Digests::kAuto;
  else if (s.digests == "on")
    digests = Digests::kOn;
  else if (s.digests == "off")
    digests = Digests::kOff;
  else
    return fail(Errc::kInvalidArgument, fmt::format("digests '{}' is not auto, on or off", s.digests));
  plan.tensor_alignment = s.tensor_alignment;
  if (s.host_layout == "file")
    plan.host_layout = HostLayout::kFileImage;
  else if (s.host_layout == "aligned")
    plan.host_layout = HostLayout::kAligned;
  else
    return fail(Errc::kInvalidArgument, fmt::format("host_layout '{}' is not file or aligned", s.host_layout));
  plan.max_gap_bytes = s.max_gap_bytes;
  if (s.gptq_v1_zeros == "auto")
    plan.gptq_v1_whole_word.reset();
  else if (s.gptq_v1_zeros == "per-field" || s.gptq_v1_zeros == "whole-word")
    plan.gptq_v1_whole_word = s.gptq_v1_zeros == "whole-word";
  else
    return fail(Errc::kInvalidArgument,
                fmt::format("gptq_v1_zeros '{}' is not auto, per-field or whole-word", s.gptq_v1_zeros));
  return {};
}

}  // namespace qload::scheduler

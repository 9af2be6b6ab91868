// LoadOptions from the settings table: the one place a resolved setting becomes a field of
// the I/O layer's, the staging pool's, the planner's or the executor's options.
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "qload/scheduler/load.hpp"

namespace qload::scheduler {
namespace {

// A choice setting's names and the option value each stands for: the one place each is
// spelt here (the settings table's `choices` text lists the same names: load_options_test).
template <typename Value>
struct Named {
  std::string_view name;
  Value value;
};

constexpr Named<io::DirectMode> kDirectModes[] = {
    {"auto", io::DirectMode::kAuto}, {"on", io::DirectMode::kOn}, {"off", io::DirectMode::kOff}};
constexpr Named<LoadMode> kLoadModes[] = {
    {"read", LoadMode::kRead}, {"mmap", LoadMode::kMmap}, {"auto", LoadMode::kAuto}};
constexpr Named<LoadOptions::Digests> kDigests[] = {
    {"auto", LoadOptions::Digests::kAuto}, {"on", LoadOptions::Digests::kOn}, {"off", LoadOptions::Digests::kOff}};
constexpr Named<HostLayout> kHostLayouts[] = {{"file", HostLayout::kFileImage}, {"aligned", HostLayout::kAligned}};
// Whether GPTQ v1's zero points are read whole-word; unset: as the checkpoint says.
constexpr Named<std::optional<bool>> kGptqV1Zeros[] = {
    {"auto", std::nullopt}, {"per-field", false}, {"whole-word", true}};

// The value `text` names, else kInvalidArgument naming the setting and its choices.
template <typename Value, std::size_t N>
Result<Value> choose(std::string_view setting, std::string_view text, const Named<Value> (&names)[N]) {
  for (const Named<Value>& n : names)
    if (n.name == text) return n.value;
  std::string choices;
  for (std::size_t i = 0; i < N; ++i)
    choices += fmt::format("{}{}", i == 0 ? "" : i + 1 == N ? " or " : ", ", names[i].name);
  return fail(Errc::kInvalidArgument, fmt::format("{} '{}' is not {}", setting, text, choices));
}

}  // namespace

Status LoadOptions::apply(const Settings& s) {
  QLOAD_ASSIGN_OR_RETURN(io.engine, io::parse_engine(s.io_engine));
  QLOAD_ASSIGN_OR_RETURN(io.direct, choose("direct_io", s.direct_io, kDirectModes));
  QLOAD_ASSIGN_OR_RETURN(plan.mode, choose("load_mode", s.load_mode, kLoadModes));
  io.queue_depth = s.io_depth;
  staging.total_bytes = s.staging_bytes;
  // A read fills at most one slot, so the two move together: a smaller slot alone would leave
  // reads that do not fit it.
  staging.slot_bytes = plan.chunk_bytes = s.slot_bytes;
  reads_in_flight = s.reads_in_flight;
  cpu_workers = s.cpu_workers;
  copy_lanes = s.copy_lanes;
  QLOAD_ASSIGN_OR_RETURN(digests, choose("digests", s.digests, kDigests));
  plan.tensor_alignment = s.tensor_alignment;
  QLOAD_ASSIGN_OR_RETURN(plan.host_layout, choose("host_layout", s.host_layout, kHostLayouts));
  plan.max_gap_bytes = s.max_gap_bytes;
  QLOAD_ASSIGN_OR_RETURN(plan.gptq_v1_whole_word, choose("gptq_v1_zeros", s.gptq_v1_zeros, kGptqV1Zeros));
  return {};
}

}  // namespace qload::scheduler

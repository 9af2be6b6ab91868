#include "qload/scheduler/model.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "qload/runtime/device.hpp"
#include "qload/runtime/units.hpp"

namespace qload::scheduler {

Model::Model(Parts parts) : parts_(std::move(parts)) {
  by_name_.resize(parts_.tensors.size());
  std::iota(by_name_.begin(), by_name_.end(), 0u);
  std::stable_sort(by_name_.begin(), by_name_.end(),
                   [&](std::uint32_t a, std::uint32_t b) { return parts_.tensors[a].name < parts_.tensors[b].name; });
}

const DeviceTensor* Model::find(std::string_view name) const {
  auto it = std::lower_bound(by_name_.begin(), by_name_.end(), name,
                             [&](std::uint32_t i, std::string_view n) { return parts_.tensors[i].name < n; });
  if (it == by_name_.end() || parts_.tensors[*it].name != name) return nullptr;
  return &parts_.tensors[*it];
}

const DeviceTensor* Model::find(std::string_view name, std::string_view device) const {
  // Compared as devices, so "cpu:0" finds what lives on "cpu".
  const Result<Device> wanted = parse_device(device);
  if (!wanted) return nullptr;
  const std::string canonical = wanted->to_string();
  auto it = std::lower_bound(by_name_.begin(), by_name_.end(), name,
                             [&](std::uint32_t i, std::string_view n) { return parts_.tensors[i].name < n; });
  for (; it != by_name_.end() && parts_.tensors[*it].name == name; ++it)
    if (parts_.tensors[*it].device == canonical) return &parts_.tensors[*it];
  return nullptr;
}

Result<const DeviceTensor*> Model::get(std::string_view name) const {
  if (const DeviceTensor* t = find(name)) return t;
  return fail(Error(Errc::kNotFound, "no such tensor in the loaded model").with_tensor(std::string(name)));
}

Status Model::copy_to_host(const DeviceTensor& tensor, std::uint64_t offset, std::span<std::byte> out) const {
  if (offset > tensor.nbytes || out.size() > tensor.nbytes - offset)
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("bytes [{}, +{}) are outside the tensor's {}", offset, out.size(), tensor.nbytes))
                    .with_tensor(tensor.name));
  if (out.empty()) return {};
  if (tensor.host) {
    std::memcpy(out.data(), tensor.data + offset, out.size());
    return {};
  }
  QLOAD_ASSIGN_OR_RETURN(const Device device, parse_device(tensor.device));
  Status copied = cuda::copy_to_host(out.data(), tensor.data + offset, out.size(), device.index);
  if (!copied) return fail(std::move(copied).error().with_tensor(tensor.name));
  return {};
}

void Model::add_load_seconds(double seconds) noexcept {
  LoadReport& r = parts_.report;
  r.seconds += seconds;
  r.gb_per_s = r.seconds > 0 ? static_cast<double>(r.tensor_bytes) / r.seconds / 1e9 : 0;
}

void Model::release() noexcept {
  parts_ = Parts{};
  by_name_.clear();
}

std::string LoadReport::summary() const {
  std::string out = fmt::format("{} tensors, {} in {:.3f} s ({:.2f} GB/s, {} mode, {})\n", tensors,
                                format_bytes(tensor_bytes), seconds, gb_per_s, load_mode_name(mode), engine);
  if (converted_tensors > 0)
    out += fmt::format("converted {} tensors on load: {} placed\n", converted_tensors, format_bytes(placed_bytes));
  if (mode == LoadMode::kRead)
    out += fmt::format("read {} in {} chunks ({} tensors direct); staging peak {} of {}\n", format_bytes(read_bytes),
                       chunks, direct_tensors, format_bytes(peak_staging_bytes), format_bytes(staging_budget_bytes));
  if (tenths_seconds.size() == 10)
    out += fmt::format("streamed: first tensor after {:.3f} s, half the bytes after {:.3f} s, all after {:.3f} s\n",
                       first_tensor_seconds, tenths_seconds[4], tenths_seconds[9]);
  if (!unpinned_reason.empty())
    out += fmt::format("copies to GPUs ran synchronously: host memory could not be pinned ({})\n", unpinned_reason);
  for (const StageStats& s : stages)
    out += fmt::format("  {:<8} {:>6} tasks  busy {:.3f} s  task time {:.3f} s\n", s.lane, s.tasks, s.busy_seconds,
                       s.task_seconds);
  return out;
}

}  // namespace qload::scheduler

#include "exec/stage_recorder.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace qload::scheduler::detail {

StageRecorder::StageRecorder(const TaskGraph& graph, TraceRecorder* trace)
    : graph_(graph), trace_(trace), lane_of_(graph.size()), slot_of_(graph.size()) {
  for (std::size_t t = 0; t < graph.size(); ++t) {
    const std::string& name = graph.nodes()[t].spec.lane;
    auto it = std::find_if(lanes_.begin(), lanes_.end(), [&](const Lane& l) { return l.name == name; });
    if (it == lanes_.end()) it = lanes_.insert(lanes_.end(), Lane{.name = name});
    lane_of_[t] = static_cast<std::uint32_t>(it - lanes_.begin());
  }
}

void StageRecorder::started(TaskId task) {
  if (trace_ == nullptr) return;
  std::vector<bool>& busy = lanes_[lane_of_[task]].slots_busy;
  auto free = std::find(busy.begin(), busy.end(), false);
  if (free == busy.end()) free = busy.insert(busy.end(), false);
  *free = true;
  slot_of_[task] = static_cast<std::uint32_t>(free - busy.begin());
}

void StageRecorder::finished(TaskId task, Clock::time_point start, Clock::time_point end) {
  Lane& lane = lanes_[lane_of_[task]];
  const TaskSpec& spec = graph_.nodes()[task].spec;
  lane.intervals.emplace_back(start, end);
  lane.bytes += spec.bytes;
  if (trace_ == nullptr) return;
  const std::uint32_t slot = slot_of_[task];
  lane.slots_busy[slot] = false;
  const std::string name = slot == 0 ? lane.name : fmt::format("{} {}", lane.name, slot + 1);
  trace_->complete(name, spec.name, start, end, spec.bytes);
}

std::vector<StageStats> StageRecorder::stats() const {
  std::vector<StageStats> out;
  for (const Lane& lane : lanes_) {
    StageStats s{.lane = lane.name, .tasks = lane.intervals.size(), .bytes = lane.bytes};
    auto sorted = lane.intervals;
    std::sort(sorted.begin(), sorted.end());
    Clock::time_point covered{};  // end of the union so far
    for (const auto& [start, end] : sorted) {
      s.task_seconds += std::chrono::duration<double>(end - start).count();
      const Clock::time_point from = std::max(start, covered);
      if (end > from) s.busy_seconds += std::chrono::duration<double>(end - from).count();
      covered = std::max(covered, end);
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace qload::scheduler::detail

// Per-lane accounting for a graph run: task counts, bytes, busy time (the union of the tasks'
// intervals, so overlapping reads count once) and trace sub-lanes (concurrent tasks of a lane
// go to "read", "read 2", ... so no two events on one trace lane overlap).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "exec/completion_queue.hpp"
#include "qload/runtime/trace.hpp"
#include "qload/scheduler/executor.hpp"

namespace qload::scheduler::detail {

class StageRecorder {
 public:
  StageRecorder(const TaskGraph& graph, TraceRecorder* trace);

  // The trace sub-lane a starting task of `lane_of(task)` takes (freed by finished()).
  void started(TaskId task);
  // Records the task's interval and frees its sub-lane.
  void finished(TaskId task, Clock::time_point start, Clock::time_point end);

  std::vector<StageStats> stats() const;

 private:
  struct Lane {
    std::string name;
    std::vector<std::pair<Clock::time_point, Clock::time_point>> intervals;
    std::uint64_t bytes = 0;
    std::vector<bool> slots_busy;  // trace sub-lanes in use
  };
  const TaskGraph& graph_;
  TraceRecorder* trace_;
  std::vector<Lane> lanes_;
  std::vector<std::uint32_t> lane_of_;  // per task
  std::vector<std::uint32_t> slot_of_;  // per running task
};

}  // namespace qload::scheduler::detail

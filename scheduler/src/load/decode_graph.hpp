// Decode tasks of the read-mode graph: once every input of a decode job is in the scratch
// arena, dequantize (rows split over several tasks) or quantize it into its device arena.
#pragma once

#include <optional>
#include <vector>

#include "load/read_graph.hpp"
#include "qload/scheduler/task_graph.hpp"

namespace qload::scheduler::detail {

// `ready[t]`: the tasks after which catalog tensor t's bytes are in place. `lanes[r]`: the
// copy-lane resource of GPU arena r (decode output for a GPU is copied there from host memory).
// Returns each decode job's tasks.
std::vector<std::vector<TaskId>> add_decode_tasks(TaskGraph& g, ReadLoadState& s,
                                                  const std::vector<std::vector<TaskId>>& ready, ResourceId workers,
                                                  const std::vector<std::optional<ResourceId>>& lanes);

}  // namespace qload::scheduler::detail

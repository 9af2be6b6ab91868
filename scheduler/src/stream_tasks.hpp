// Streaming (LoadOptions::on_tensor) in read mode: one "stream" task per tensor of the model,
// run once every task that writes or checks its bytes has finished, which hands it to the
// callback while the rest still loads.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "load_internal.hpp"
#include "qload/scheduler/task_graph.hpp"

namespace qload::scheduler::detail {

struct TensorStream {
  std::span<const DeviceTensor> tensors;                // the model's tensors as they will be (describe_tensors)
  std::span<const TensorOrigin> origins;                // of each of them
  std::span<const std::shared_ptr<const void>> owners;  // of each one's memory (keep_alive), or null
  const LoadOptions::TensorCallback& callback;
};

// `finishers[t]`: the tasks after which catalog tensor t is in place everywhere and verified;
// `decoders[j]`: the tasks of decode job j. Calls are serialised by a resource of their own.
void add_stream_tasks(TaskGraph& g, const Plan& plan, const TensorStream& stream,
                      const std::vector<std::vector<TaskId>>& finishers,
                      const std::vector<std::vector<TaskId>>& decoders);

}  // namespace qload::scheduler::detail

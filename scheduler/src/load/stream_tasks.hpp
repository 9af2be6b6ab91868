// Streaming (LoadContext::on_tensor) in read mode: one "stream" task per tensor of the model,
// run once every task that writes or checks its bytes has finished, which hands it to the
// callback while the rest still loads.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "load/load_internal.hpp"
#include "qload/scheduler/task_graph.hpp"

namespace qload::scheduler::detail {

struct TensorStream {
  std::span<const DeviceTensor> tensors;                // the model's tensors as they will be (describe_tensors)
  std::span<const TensorOrigin> origins;                // of each of them
  std::span<const std::shared_ptr<const void>> owners;  // of each one's memory (keep_alive), or null
  const LoadContext::TensorCallback& callback;
  LoadClock::time_point begin;    // the load's start
  std::uint64_t total_bytes = 0;  // of `tensors`
  // When tensors were handed over (LoadReport::first_tensor_seconds, tenths_seconds), filled
  // one call at a time.
  double first_seconds = 0;
  std::vector<double> tenths_seconds;
  std::uint64_t handed_count = 0;
  std::uint64_t handed_bytes = 0;
  // Records tensor i's hand-over, now.
  void handed(std::uint32_t i);
};

// `finishers[t]`: the tasks after which catalog tensor t is in place everywhere and verified;
// `decoders[j]`: the tasks of decode job j. Calls are serialised by a resource of their own.
void add_stream_tasks(TaskGraph& g, const Plan& plan, TensorStream& stream,
                      const std::vector<std::vector<TaskId>>& finishers,
                      const std::vector<std::vector<TaskId>>& decoders);

}  // namespace qload::scheduler::detail

#include "load/stream_tasks.hpp"

#include <fmt/format.h>

namespace qload::scheduler::detail {

void TensorStream::handed(std::uint32_t i) {
  const double at = std::chrono::duration<double>(LoadClock::now() - begin).count();
  if (handed_count++ == 0) first_seconds = at;
  handed_bytes += tensors[i].nbytes;
  // Every tenth reached by now (all of them once the last byte is handed over): k tenths are
  // ceil(total * k / 10) bytes, computed without forming total * k.
  const auto tenths = [&](std::uint64_t k) { return total_bytes / 10 * k + ((total_bytes % 10) * k + 9) / 10; };
  while (tenths_seconds.size() < 10 && handed_bytes >= tenths(tenths_seconds.size() + 1)) tenths_seconds.push_back(at);
}

void add_stream_tasks(TaskGraph& g, const Plan& plan, TensorStream& stream,
                      const std::vector<std::vector<TaskId>>& finishers,
                      const std::vector<std::vector<TaskId>>& decoders) {
  const ResourceId caller = g.add_resource("tensor callback", 1);
  for (std::uint32_t i = 0; i < stream.tensors.size(); ++i) {
    const DeviceTensor& tensor = stream.tensors[i];
    const TensorOrigin origin = stream.origins[i];
    const TaskId task = g.add({.lane = "stream",
                               .name = fmt::format("{} on {}", tensor.name, tensor.device),
                               .priority = -1,  // as soon as it is complete: the caller is waiting for it
                               .bytes = tensor.nbytes,
                               .work = CpuWork{[&stream, i]() -> Status {
                                 Status handed = stream.callback(i, stream.tensors[i], stream.owners[i]);
                                 if (!handed)
                                   return fail(std::move(handed.error()).with_tensor(stream.tensors[i].name));
                                 stream.handed(i);
                                 return {};
                               }},
                               .claims = {{caller, 1}}});
    if (!origin.decoded) {
      for (const TaskId t : finishers[origin.index]) g.depends_on(task, t);
      continue;
    }
    // A decode output: its job's tasks, and its inputs' checks (decoding does not wait for them).
    for (const TaskId t : decoders[origin.index]) g.depends_on(task, t);
    for (const std::uint32_t input : plan.decode.jobs[origin.index].inputs)
      for (const TaskId t : finishers[input]) g.depends_on(task, t);
  }
}

}  // namespace qload::scheduler::detail

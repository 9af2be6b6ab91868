// Runs a TaskGraph: ready tasks start in priority order as far as the resource budgets allow;
// reads go to an I/O thread that drives the Reader (submit / wait), CPU work to a pool of
// worker threads, and every completion funnels into one queue that the scheduling loop (the
// calling thread) waits on.
//
// On the first error nothing more is started; tasks already started are waited for, every
// hold is released (its on_release runs) and the error is returned with a note naming the
// task. Either way, the I/O thread and the workers are joined before execute() returns, and no
// read is still writing into any buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stop_token>
#include <string>
#include <vector>

#include "qload/io/reader.hpp"
#include "qload/runtime/error.hpp"
#include "qload/runtime/trace.hpp"
#include "qload/scheduler/task_graph.hpp"

namespace qload::scheduler {

struct ExecutorOptions {
  // Worker threads for CpuWork. Concurrency is limited by the tasks' claims; this only needs
  // to be at least the CPU-worker budget the graph's tasks claim.
  std::size_t cpu_threads = 2;
  // Each task becomes a complete event on its lane ("read", "read 2", ... : concurrent tasks
  // of one lane get numbered sub-lanes so events on a lane never overlap), each resource a
  // counter. Not owned; may be null.
  TraceRecorder* trace = nullptr;
  // Called on the executor's own thread after each task succeeds, with its lane and bytes
  // (progress bars, stats). Must be quick: the scheduling loop waits for it.
  std::function<void(std::string_view lane, std::uint64_t bytes)> on_task_done;
  // A stop request (from any thread: a Ctrl-C in Python, a server shutting down) ends the run
  // as the first error would, with kCancelled: nothing more starts, running tasks are waited for.
  std::stop_token stop;
};

struct StageStats {
  std::string lane;
  std::uint64_t tasks = 0;
  std::uint64_t bytes = 0;
  double busy_seconds = 0;  // wall time with at least one task of the lane running
  double task_seconds = 0;  // sum of the tasks' own durations (can exceed the wall time)
};

struct ResourceStats {
  std::string name;
  std::uint64_t capacity = 0;
  std::uint64_t peak = 0;  // most ever in use at once
};

struct ExecutionStats {
  double seconds = 0;
  std::uint64_t tasks = 0;
  std::vector<StageStats> stages;        // in order of first appearance in the graph
  std::vector<ResourceStats> resources;  // in the graph's order
};

// Runs every task of `graph`. `reader` may be null when the graph has no IoWork; it is used
// only by the I/O thread while this runs. Errors: the first task error (with a note naming
// the task), kInvalidArgument / kInternal from graph.validate(), kInternal on a deadlock.
Result<ExecutionStats> execute(TaskGraph& graph, io::Reader* reader, const ExecutorOptions& options);

}  // namespace qload::scheduler

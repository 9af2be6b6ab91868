// The scheduling loop. Ready tasks wait in queues grouped by the set of resources they need;
// within a group they are ordered by (priority, id). The loop looks only at group heads, in
// priority order: a head that does not fit blocks every resource it needs for the heads after
// it, so a task is never overtaken on a resource by a lower-priority one (no starvation) while
// tasks needing other resources still run.
#include "qload/scheduler/executor.hpp"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <map>
#include <memory>
#include <optional>
#include <queue>

#include <fmt/format.h>

#include "exec/completion_queue.hpp"
#include "exec/io_thread.hpp"
#include "exec/stage_recorder.hpp"
#include "qload/runtime/exception_error.hpp"
#include "qload/runtime/thread_pool.hpp"

namespace qload::scheduler {
namespace {

using detail::Clock;
using detail::Completion;

enum class State : std::uint8_t { kWaiting, kReady, kRunning, kDone };

// A task's body, its exception (std::bad_alloc, a container's length_error: qload code reports
// errors as values, but a library it calls may throw) made the task's error: one escaping a
// worker thread would terminate the process that embeds qload. finish() names the task.
template <typename Work>
auto guarded(const Work& work) -> decltype(work()) {
  try {
    return work();
  } catch (...) {
    return fail(error_from_exception(std::current_exception(), "its work threw"));
  }
}

using ReadyQueue =
    std::priority_queue<std::pair<std::int64_t, TaskId>, std::vector<std::pair<std::int64_t, TaskId>>, std::greater<>>;

class Run {
 public:
  Run(TaskGraph& graph, io::Reader* reader, const ExecutorOptions& options);
  Result<ExecutionStats> go();

 private:
  void group_tasks();
  void make_ready(TaskId t);
  void dispatch();
  bool fits(TaskId t) const;
  void acquire(TaskId t);
  void use(ResourceId r, std::int64_t delta);
  void start(TaskId t);
  void finish(Completion c);
  void release_hold(HoldId h);
  void stop_workers();
  void cancel_if_stopped();

  TaskGraph& graph_;
  io::Reader* reader_;
  ExecutorOptions options_;
  detail::CompletionQueue queue_;
  detail::StageRecorder stages_;
  std::vector<State> state_;
  std::vector<std::uint32_t> waiting_on_;       // unfinished dependencies per task
  std::vector<std::uint32_t> hold_users_left_;  // per hold: acquirer + users not yet finished
  std::vector<bool> hold_taken_;                // acquired and not yet released
  std::vector<std::vector<ResourceId>> group_resources_;
  std::vector<std::vector<std::uint64_t>> demand_;  // per task: amount per resource (dense)
  std::vector<std::uint32_t> group_of_;
  std::vector<ReadyQueue> ready_;
  std::vector<std::uint64_t> in_use_, peak_;
  std::vector<Clock::time_point> started_at_;
  std::size_t running_ = 0, finished_ = 0;
  std::optional<Error> error_;
  std::atomic<bool> cancelled_{false};
  // Declared last, destroyed first: they are joined while everything above still exists.
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<detail::IoThread> io_;
};

Run::Run(TaskGraph& graph, io::Reader* reader, const ExecutorOptions& options)
    : graph_(graph),
      reader_(reader),
      options_(options),
      stages_(graph, options.trace),
      state_(graph.size(), State::kWaiting),
      waiting_on_(graph.size()),
      hold_users_left_(graph.holds().size()),
      hold_taken_(graph.holds().size(), false),
      in_use_(graph.resources().size()),
      peak_(graph.resources().size()),
      started_at_(graph.size()) {
  for (std::size_t h = 0; h < graph.holds().size(); ++h)
    hold_users_left_[h] = 1 + static_cast<std::uint32_t>(graph.holds()[h].users.size());
  group_tasks();
}

// Dense per-task demand (claims plus acquired holds) and the group of tasks needing the same
// set of resources.
void Run::group_tasks() {
  const std::size_t n_resources = graph_.resources().size();
  std::map<std::vector<ResourceId>, std::uint32_t> groups;
  demand_.resize(graph_.size());
  group_of_.resize(graph_.size());
  for (TaskId t = 0; t < graph_.size(); ++t) {
    const TaskGraph::Node& node = graph_.nodes()[t];
    std::vector<std::uint64_t>& d = demand_[t];
    d.assign(n_resources, 0);
    for (const Claim& c : node.spec.claims) d[c.resource] += c.amount;
    for (const HoldId h : node.acquires) d[graph_.holds()[h].claim.resource] += graph_.holds()[h].claim.amount;
    std::vector<ResourceId> key;
    for (ResourceId r = 0; r < n_resources; ++r)
      if (d[r] > 0) key.push_back(r);
    auto [it, added] = groups.try_emplace(key, static_cast<std::uint32_t>(group_resources_.size()));
    if (added) group_resources_.push_back(key);
    group_of_[t] = it->second;
    waiting_on_[t] = static_cast<std::uint32_t>(node.dependencies.size());
  }
  ready_.resize(group_resources_.size());
}

void Run::make_ready(TaskId t) {
  state_[t] = State::kReady;
  ready_[group_of_[t]].emplace(graph_.nodes()[t].spec.priority, t);
}

bool Run::fits(TaskId t) const {
  for (const ResourceId r : group_resources_[group_of_[t]])
    if (in_use_[r] + demand_[t][r] > graph_.resources()[r].capacity) return false;
  return true;
}

void Run::dispatch() {
  std::vector<bool> blocked(graph_.resources().size());
  std::vector<std::pair<std::int64_t, TaskId>> heads;
  for (;;) {
    heads.clear();
    for (const ReadyQueue& q : ready_)
      if (!q.empty()) heads.push_back(q.top());
    std::sort(heads.begin(), heads.end());
    std::fill(blocked.begin(), blocked.end(), false);
    std::optional<TaskId> next;
    for (const auto& [priority, t] : heads) {
      const auto& needs = group_resources_[group_of_[t]];
      const bool waits = std::any_of(needs.begin(), needs.end(), [&](ResourceId r) { return blocked[r]; });
      if (!waits && fits(t)) {
        next = t;
        break;
      }
      for (const ResourceId r : needs) blocked[r] = true;
    }
    if (!next) return;
    ready_[group_of_[*next]].pop();
    start(*next);
  }
}

void Run::use(ResourceId r, std::int64_t delta) {
  in_use_[r] = static_cast<std::uint64_t>(static_cast<std::int64_t>(in_use_[r]) + delta);
  peak_[r] = std::max(peak_[r], in_use_[r]);
  if (options_.trace != nullptr)
    options_.trace->counter(graph_.resources()[r].name, static_cast<std::int64_t>(in_use_[r]));
}

void Run::acquire(TaskId t) {
  for (const Claim& c : graph_.nodes()[t].spec.claims) use(c.resource, static_cast<std::int64_t>(c.amount));
  for (const HoldId h : graph_.nodes()[t].acquires) {
    const Claim& c = graph_.holds()[h].claim;
    use(c.resource, static_cast<std::int64_t>(c.amount));
    hold_taken_[h] = true;
  }
}

void Run::start(TaskId t) {
  acquire(t);
  state_[t] = State::kRunning;
  ++running_;
  started_at_[t] = Clock::now();
  stages_.started(t);
  TaskSpec& spec = graph_.nodes()[t].spec;
  if (auto* io_work = std::get_if<IoWork>(&spec.work)) {
    Result<io::ReadRequest> request = guarded(io_work->prepare);
    if (!request)
      return queue_.push(Completion{.task = t, .status = fail(std::move(request.error())), .end = Clock::now()});
    request->tag = t;
    if (!io_) io_ = std::make_unique<detail::IoThread>(*reader_, queue_);
    io_->submit(*request);
    return;
  }
  if (!pool_) pool_ = std::make_unique<ThreadPool>(options_.cpu_threads, "qload-cpu");
  pool_->submit([this, t, run = &std::get<CpuWork>(spec.work).run] {
    // Started by the loop before the error, reached by a worker after it: skip the work.
    if (cancelled_.load(std::memory_order_relaxed))
      return queue_.push(Completion{.task = t, .status = fail(Errc::kCancelled, "cancelled"), .end = Clock::now()});
    const Clock::time_point begin = Clock::now();
    Status status = guarded(*run);
    queue_.push(Completion{.task = t, .status = std::move(status), .start = begin, .end = Clock::now()});
  });
}

void Run::release_hold(HoldId h) {
  if (!hold_taken_[h]) return;
  hold_taken_[h] = false;
  TaskGraph::Hold& hold = graph_.holds()[h];
  use(hold.claim.resource, -static_cast<std::int64_t>(hold.claim.amount));
  if (hold.on_release) hold.on_release();
}

void Run::finish(Completion c) {
  const TaskId t = c.task;
  TaskGraph::Node& node = graph_.nodes()[t];
  assert(state_[t] == State::kRunning);
  state_[t] = State::kDone;
  --running_;
  ++finished_;
  stages_.finished(t, c.start == Clock::time_point{} ? started_at_[t] : c.start, c.end);
  for (const Claim& cl : node.spec.claims) use(cl.resource, -static_cast<std::int64_t>(cl.amount));
  for (const HoldId h : node.uses)
    if (--hold_users_left_[h] == 0) release_hold(h);
  if (!c.status) {
    if (!error_) {
      error_ = std::move(c.status.error()).with_note(fmt::format("in {} task '{}'", node.spec.lane, node.spec.name));
      cancelled_.store(true, std::memory_order_relaxed);
    }
    return;
  }
  if (options_.on_task_done) options_.on_task_done(node.spec.lane, node.spec.bytes);
  for (const TaskId d : node.dependents)
    if (--waiting_on_[d] == 0) make_ready(d);
}

// A stop request is the run's error unless it already has one; the workers skip what they
// have not begun.
void Run::cancel_if_stopped() {
  if (error_ || !options_.stop.stop_requested()) return;
  error_ = Error(Errc::kCancelled, "the load was cancelled");
  cancelled_.store(true, std::memory_order_relaxed);
}

// Joins the I/O thread (every read handed to it has completed by now) and the workers.
void Run::stop_workers() {
  io_.reset();
  pool_.reset();
}

Result<ExecutionStats> Run::go() {
  QLOAD_TRY(graph_.validate());
  for (const TaskGraph::Node& node : graph_.nodes())
    if (std::holds_alternative<IoWork>(node.spec.work) && reader_ == nullptr)
      return fail(Errc::kInvalidArgument, fmt::format("read task '{}' but no Reader was given", node.spec.name));
  const Clock::time_point begin = Clock::now();
  // Called at once if a stop was requested already; else on the requesting thread, later.
  const std::stop_callback wake_on_stop(options_.stop, [this] { queue_.wake(); });
  for (TaskId t = 0; t < graph_.size(); ++t)
    if (waiting_on_[t] == 0) make_ready(t);
  cancel_if_stopped();
  if (!error_) dispatch();
  while (running_ > 0) {
    for (Completion& c : queue_.take_all()) finish(std::move(c));
    cancel_if_stopped();
    if (!error_) dispatch();
  }
  stop_workers();
  for (HoldId h = 0; h < graph_.holds().size(); ++h) release_hold(h);  // those of skipped users
  if (error_) return fail(std::move(*error_));
  if (finished_ != graph_.size())
    return fail(Errc::kInternal,
                fmt::format("deadlock: {} of {} tasks finished and none can start", finished_, graph_.size()));
  ExecutionStats stats{.seconds = std::chrono::duration<double>(Clock::now() - begin).count(), .tasks = finished_};
  stats.stages = stages_.stats();
  for (std::size_t r = 0; r < graph_.resources().size(); ++r)
    stats.resources.push_back(ResourceStats{graph_.resources()[r].name, graph_.resources()[r].capacity, peak_[r]});
  return stats;
}

}  // namespace

Result<ExecutionStats> execute(TaskGraph& graph, io::Reader* reader, const ExecutorOptions& options) {
  Run run(graph, reader, options);
  return run.go();
}

}  // namespace qload::scheduler

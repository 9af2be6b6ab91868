// A DAG of tasks with explicit dependencies and resource claims, run by execute()
// (executor.hpp). General on purpose: the first load path has read, verify and place tasks;
// later issues add decode, h2d and distribute without touching the executor.
//
// Resources are named budgets (staging bytes, reads in flight, CPU workers, ...). A task
// claims amounts of them for as long as it runs; a hold claims an amount from the moment one
// task (its acquirer) starts until that task and every one of the hold's users have finished,
// which is how a staging slot stays taken until its last consumer is done.
//
// Thread-safety: build a graph on one thread, then hand it to execute().
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "qload/io/reader.hpp"
#include "qload/runtime/error.hpp"

namespace qload::scheduler {

using TaskId = std::uint32_t;
using ResourceId = std::uint32_t;
using HoldId = std::uint32_t;

// A read driven by the executor's I/O thread through the Reader.
struct IoWork {
  // Called on the executor thread when the task starts (its resources acquired): returns the
  // read to issue. Its destination must stay valid until the task has completed.
  std::function<Result<io::ReadRequest>()> prepare;
};

// Work for a CPU worker thread.
struct CpuWork {
  std::function<Status()> run;
};

struct Claim {
  ResourceId resource = 0;
  std::uint64_t amount = 0;
};

struct TaskSpec {
  std::string lane;           // stage and trace lane: "read", "verify", "place", ...
  std::string name;           // trace event name, and error note ("chunk 12")
  std::int64_t priority = 0;  // among ready tasks, lower starts first
  std::uint64_t bytes = 0;    // bytes the task moves (trace args, stage totals)
  std::variant<IoWork, CpuWork> work;
  std::vector<Claim> claims;  // held while the task runs
};

class TaskGraph {
 public:
  struct Resource {
    std::string name;
    std::uint64_t capacity = 0;
  };
  struct Hold {
    TaskId acquirer = 0;
    Claim claim;
    std::function<void()> on_release;  // runs on the executor thread once released
    std::vector<TaskId> users;         // besides the acquirer
  };
  struct Node {
    TaskSpec spec;
    std::vector<TaskId> dependencies;
    std::vector<TaskId> dependents;
    std::vector<HoldId> acquires;  // holds taken when this task starts
    std::vector<HoldId> uses;      // holds this task keeps alive (acquired ones included)
  };

  ResourceId add_resource(std::string name, std::uint64_t capacity);
  TaskId add(TaskSpec spec);
  // `task` starts only after `dependency` has finished. The dependency must be an earlier task,
  // so every graph is acyclic by construction (asserted).
  void depends_on(TaskId task, TaskId dependency);
  // A hold of `claim`, acquired as `acquirer` starts and released once the acquirer and every
  // user added with add_hold_user have finished (or when a failed run ends), after which
  // `on_release` runs on the executor thread.
  HoldId add_hold(TaskId acquirer, Claim claim, std::function<void()> on_release = {});
  // `user` must depend, directly or through other tasks, on the hold's acquirer.
  void add_hold_user(HoldId hold, TaskId user);

  // kInvalidArgument if a task or hold claims more than a resource's capacity (it could never
  // start) or names an unknown resource; kInternal if a hold user does not depend on its
  // acquirer (the hold could be released under it).
  Status validate() const;

  std::size_t size() const noexcept { return nodes_.size(); }
  const std::vector<Resource>& resources() const noexcept { return resources_; }
  const std::vector<Node>& nodes() const noexcept { return nodes_; }
  std::vector<Node>& nodes() noexcept { return nodes_; }
  const std::vector<Hold>& holds() const noexcept { return holds_; }
  std::vector<Hold>& holds() noexcept { return holds_; }

 private:
  bool reaches(TaskId from, TaskId ancestor) const;

  std::vector<Resource> resources_;
  std::vector<Node> nodes_;
  std::vector<Hold> holds_;
};

}  // namespace qload::scheduler

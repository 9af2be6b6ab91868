#include "qload/scheduler/task_graph.hpp"

#include <algorithm>
#include <cassert>

#include <fmt/format.h>

namespace qload::scheduler {

ResourceId TaskGraph::add_resource(std::string name, std::uint64_t capacity) {
  resources_.push_back(Resource{std::move(name), capacity});
  return static_cast<ResourceId>(resources_.size() - 1);
}

TaskId TaskGraph::add(TaskSpec spec) {
  nodes_.push_back(Node{.spec = std::move(spec)});
  return static_cast<TaskId>(nodes_.size() - 1);
}

void TaskGraph::depends_on(TaskId task, TaskId dependency) {
  assert(dependency < task && task < nodes_.size());
  nodes_[task].dependencies.push_back(dependency);
  nodes_[dependency].dependents.push_back(task);
}

HoldId TaskGraph::add_hold(TaskId acquirer, Claim claim, std::function<void()> on_release) {
  assert(acquirer < nodes_.size());
  const auto id = static_cast<HoldId>(holds_.size());
  holds_.push_back(Hold{.acquirer = acquirer, .claim = claim, .on_release = std::move(on_release)});
  nodes_[acquirer].acquires.push_back(id);
  nodes_[acquirer].uses.push_back(id);
  return id;
}

void TaskGraph::add_hold_user(HoldId hold, TaskId user) {
  assert(hold < holds_.size() && user < nodes_.size());
  holds_[hold].users.push_back(user);
  nodes_[user].uses.push_back(hold);
}

// Whether `from` depends on `ancestor`, directly or not. Task ids are a topological order, so
// the search never needs to look below the ancestor's id.
bool TaskGraph::reaches(TaskId from, TaskId ancestor) const {
  std::vector<TaskId> stack{from};
  std::vector<bool> seen(nodes_.size() - ancestor, false);
  while (!stack.empty()) {
    const TaskId t = stack.back();
    stack.pop_back();
    for (const TaskId d : nodes_[t].dependencies) {
      if (d == ancestor) return true;
      if (d < ancestor || seen[d - ancestor]) continue;
      seen[d - ancestor] = true;
      stack.push_back(d);
    }
  }
  return false;
}

Status TaskGraph::validate() const {
  std::vector<std::uint64_t> demand(resources_.size());
  for (const Node& n : nodes_) {
    // What the task needs at once to start: its own claims plus the holds it acquires.
    std::fill(demand.begin(), demand.end(), 0);
    auto add = [&](const Claim& c) -> Status {
      if (c.resource >= resources_.size())
        return fail(Errc::kInvalidArgument,
                    fmt::format("{} task '{}' claims unknown resource {}", n.spec.lane, n.spec.name, c.resource));
      demand[c.resource] += c.amount;
      return {};
    };
    for (const Claim& c : n.spec.claims) QLOAD_TRY(add(c));
    for (const HoldId h : n.acquires) QLOAD_TRY(add(holds_[h].claim));
    for (std::size_t r = 0; r < resources_.size(); ++r)
      if (demand[r] > resources_[r].capacity)
        return fail(Errc::kInvalidArgument,
                    fmt::format("{} task '{}' needs {} of '{}' but the budget is {}: it could never start", n.spec.lane,
                                n.spec.name, demand[r], resources_[r].name, resources_[r].capacity));
  }
  for (const Hold& h : holds_)
    for (const TaskId user : h.users)
      if (user != h.acquirer && !reaches(user, h.acquirer))
        return fail(Errc::kInternal, fmt::format("task '{}' uses a hold of '{}' without depending on it",
                                                 nodes_[user].spec.name, nodes_[h.acquirer].spec.name));
  return {};
}

}  // namespace qload::scheduler

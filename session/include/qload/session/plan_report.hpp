// The plan of a load as data (`qload plan --json`, and what a lock's plan hash covers): for
// every stored tensor its source range and where it lands (device, arena offset, dtype,
// bytes) or which decode consumes it; for every decode job what it makes and where. Read
// chunks, the staging pool and other execution details are left out: they decide how fast,
// not what is loaded. File paths are relative to the checkpoint's root, so the same files
// anywhere give the same plan and the same hash.
#pragma once

#include <cstdint>
#include <functional>

#include <nlohmann/json.hpp>

#include "qload/formats/catalog.hpp"
#include "qload/scheduler/plan.hpp"

namespace qload::session {

nlohmann::json plan_json(const formats::Catalog& catalog, const scheduler::Plan& plan);
// plan_json's "tensors" entries, then its "decodes" entries, one at a time and in order, without
// holding the whole document (a plan of millions of tensors printed as text).
void for_each_plan_entry(const formats::Catalog& catalog, const scheduler::Plan& plan,
                         const std::function<void(const nlohmann::json&)>& tensor,
                         const std::function<void(const nlohmann::json&)>& decode);
// XXH3-64 of the plan's canonical JSON text (plan_json dumped without indentation).
std::uint64_t plan_hash(const nlohmann::json& plan);
// The same hash, streamed: memory for one tensor's entry at a time, not the whole plan's.
std::uint64_t plan_hash(const formats::Catalog& catalog, const scheduler::Plan& plan);

}  // namespace qload::session

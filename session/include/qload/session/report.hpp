// A load's report as data: the one JSON document every client gives as it is (the CLI's
// `load --json` and `--stream`, Python's Model.report and Stream.report), so that a key means
// the same thing everywhere. Versioned by its "schema" field; a client adds only what it alone
// knows (the CLI: the devices it was given and the process's peak RSS), never renames.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "qload/scheduler/model.hpp"

namespace qload::session {

inline constexpr std::string_view kLoadReportSchema = "qload.load/2";

// {"schema", "mode", "engine", "tensors", "tensor_bytes", "placed_bytes", "read_bytes",
//  "filled_bytes", "shared_received_bytes", "chunks", "direct_tensors", "converted_tensors", "decoded_tensors",
//  "seconds", "gb_per_s", "staging_budget_bytes", "peak_staging_bytes", "unpinned_reason",
//  "first_tensor_seconds", "tenths_seconds", "stages": [{"stage", "tasks", "bytes",
//  "busy_seconds", "task_seconds"}]}: the fields of scheduler::LoadReport under their own names.
nlohmann::json load_report_json(const scheduler::LoadReport& report);

}  // namespace qload::session

#include "qload/session/report.hpp"

#include <string>

namespace qload::session {

nlohmann::json load_report_json(const scheduler::LoadReport& r) {
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& s : r.stages)
    stages.push_back({{"stage", s.lane},
                      {"tasks", s.tasks},
                      {"bytes", s.bytes},
                      {"busy_seconds", s.busy_seconds},
                      {"task_seconds", s.task_seconds}});
  return {{"schema", std::string(kLoadReportSchema)},
          {"mode", std::string(scheduler::load_mode_name(r.mode))},
          {"engine", r.engine},
          {"tensors", r.tensors},
          {"tensor_bytes", r.tensor_bytes},
          {"placed_bytes", r.placed_bytes},
          {"read_bytes", r.read_bytes},
          {"filled_bytes", r.io.filled_bytes},
          {"shared_received_bytes", r.shared_received_bytes},
          {"chunks", r.chunks},
          {"direct_tensors", r.direct_tensors},
          {"converted_tensors", r.converted_tensors},
          {"decoded_tensors", r.decoded_tensors},
          {"seconds", r.seconds},
          {"gb_per_s", r.gb_per_s},
          {"staging_budget_bytes", r.staging_budget_bytes},
          {"peak_staging_bytes", r.peak_staging_bytes},
          {"unpinned_reason", r.unpinned_reason},
          {"first_tensor_seconds", r.first_tensor_seconds},
          {"tenths_seconds", r.tenths_seconds},
          {"stages", stages}};
}

}  // namespace qload::session

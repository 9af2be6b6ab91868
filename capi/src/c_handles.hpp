// What the C ABI's opaque handles hold (qload/qload.h declares them incomplete).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qload/qload.h"
#include "qload/session/load.hpp"  // the request and the model

struct qload_session {
  std::optional<qload::session::LoadRequest> request;  // consumed by the one load it runs
};

struct qload_model {
  // Shared with every DLPack tensor exported from it, which keep the memory alive.
  std::shared_ptr<const qload::scheduler::Model> model;
  std::vector<std::vector<std::int64_t>> shapes;  // per tensor, for qload_tensor_info
  std::vector<std::vector<const char*>> roles;    // per quantized weight
  std::vector<std::vector<std::size_t>> parts;
  std::vector<std::string> schemes;
  std::string report_json;  // session::load_report_json, for qload_model_report_json
};

// What was loaded, written as safetensors for other tools: `qload load --dump` and
// `qload convert`.
#pragma once

#include <string>

#include "qload/runtime/error.hpp"
#include "qload/runtime/log.hpp"
#include "qload/scheduler/model.hpp"
#include "qload/session/request.hpp"

namespace qload::session {

// One safetensors file per device, DIR/<prefix><device>.safetensors (`prefix` keeps the ranks
// of a multi-process load apart: "rank1."). GPU tensors are copied back one writer chunk at a
// time, so a dump holds no more than one chunk of host memory for them.
Status dump(const scheduler::Model& model, const std::string& dir, const std::string& prefix);

struct Converted {
  scheduler::LoadReport report;  // of the load that was written
  std::string weights;           // OUT/model.safetensors
};

// Loads `spec` into host memory with its decode policies, then writes OUT/model.safetensors
// (atomically) and, when the checkpoint has one, OUT/config.json with its quantization_config
// rewritten to describe what was written (so transformers and vLLM read it as such).
Result<Converted> convert(const LoadSpec& spec, const std::string& out, const Logger& log);

}  // namespace qload::session

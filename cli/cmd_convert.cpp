// `qload convert SRC OUT [--dequantize T | --quantize Q] [--dtype T]`: loads SRC to host memory
// with the same decode policies as `qload load`, then writes OUT as a checkpoint other tools
// read: OUT/model.safetensors (atomically) and, when SRC has one, OUT/config.json with its
// quantization_config rewritten to describe what was written.
#include <fmt/format.h>

#include "commands.hpp"
#include "qload/runtime/units.hpp"
#include "qload/session/write.hpp"

namespace qload::cli {

int run_convert(const ConvertArgs& args) {
  const session::LoadSpec spec{.source = args.source,
                               .devices = "cpu",
                               .dtype = args.dtype,
                               .dequantize = args.dequantize,
                               .quantize = args.quantize,
                               .names = flag_names()};
  auto converted = session::convert(spec, args.out, Logger::to_stderr(LogLevel::kWarn));
  if (!converted) return report(converted.error());
  const scheduler::LoadReport& r = converted->report;
  fmt::print("qload: wrote {} ({} tensors, {} decoded, {} converted) to {}\n", format_bytes(r.placed_bytes), r.tensors,
             r.decoded_tensors, r.converted_tensors, converted->weights);
  return 0;
}

}  // namespace qload::cli

// `qload synth OUT [...] [--quant NAME]`: writes a deterministic llama-shaped checkpoint, its
// linear weights optionally quantized (synth.hpp lists the schemes).
#include <fmt/format.h>

#include "commands.hpp"
#include "qload/runtime/units.hpp"
#include "qload/session/synth.hpp"

namespace qload::cli {

int run_synth(const SynthArgs& args) {
  session::SynthOptions o = args.options;
  if (args.dtype == "bf16")
    o.dtype = DType::kBF16;
  else if (args.dtype == "f16")
    o.dtype = DType::kF16;
  else if (args.dtype == "f32")
    o.dtype = DType::kF32;
  else
    return report(Error(Errc::kInvalidArgument, fmt::format("--dtype {} is not one of bf16, f16, f32", args.dtype)));
  auto result = session::synthesize(args.out, o);
  if (!result) return report(result.error());
  fmt::print("wrote {} tensors, {} in {} file(s) to {}{}\n", result->tensors, format_bytes(result->bytes),
             result->files, escape_for_terminal(args.out), o.quant.empty() ? "" : " (quantized: " + o.quant + ")");
  return 0;
}

}  // namespace qload::cli

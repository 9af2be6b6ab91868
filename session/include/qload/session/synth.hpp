// Deterministic llama-shaped checkpoints, plain or quantized, for examples, tests and
// benchmarks (`qload synth`): the recipe layer's generator, as clients of the session see it.
#pragma once

#include "qload/scripts/synth.hpp"

namespace qload::session {

using scripts::kSynthQuantNames;
using scripts::synthesize;
using scripts::SynthOptions;
using scripts::SynthReport;

}  // namespace qload::session

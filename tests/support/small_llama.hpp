// A small synthetic llama checkpoint (2 layers, hidden 128) for tests that need a real model
// directory but not a particular shape.
#pragma once

#include <catch2/catch.hpp>

#include <string>

#include "qload/session/synth.hpp"
#include "support/scratch.hpp"

namespace qload::testing {

// Writes it to `dir`/m and returns that path (FAILs the test if synth fails).
inline std::string small_llama(const ScratchDir& dir) {
  session::SynthOptions o;
  o.layers = 2;
  o.hidden = 128;
  o.intermediate = 352;
  o.vocab = 300;
  const std::string out = dir.file("m");
  const auto made = session::synthesize(out, o);
  if (!made) FAIL(made.error().to_string());
  return out;
}

}  // namespace qload::testing

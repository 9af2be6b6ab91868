// libFuzzer target: recipe source (Lua) under tight sandbox limits, then the questions the
// scheduler asks a recipe at plan time, so hooks and pattern rules run too.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "qload/scheduler/load.hpp"
#include "qload/scripts/recipe.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace qload;
  const scripts::SandboxLimits limits{
      .max_instructions = 1'000'000, .max_wall_time = std::chrono::milliseconds(500), .max_memory_bytes = 32 << 20};
  // A folder that does not exist: `require` and `source` globs find nothing on this machine.
  auto recipe = scripts::parse_recipe(std::string(reinterpret_cast<const char*>(data), size),
                                      "/nonexistent/qload-fuzz/recipe.lua", limits);
  if (!recipe) return 0;
  for (const char* name : {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight", "lm_head.weight"}) {
    (void)recipe->weight_policy(name);
    (void)recipe->split(name);
    (void)recipe->place(name);
  }
  scheduler::LoadOptions options;
  (void)recipe->apply(options);
  return 0;
}

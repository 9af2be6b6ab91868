-- Placement by a plan-time function (from a helper module beside this recipe): layer 0 on
-- cpu:0, the rest on cpu:1. The function runs once per tensor while the load is planned,
-- never per byte.
--   qload synth build/tiny-llama && qload plan examples/recipes/split_by_hook.lua
local llama = require("lib.llama")
return qload.recipe {
  source    = "../../build/tiny-llama",
  devices   = { "cpu:0", "cpu:1" },
  placement = llama.split_at(1, "cpu:0", "cpu:1"),
  dtype     = "f32",
}

-- Load the tiny llama onto the first GPU, converting every floating tensor to bf16 there
-- (the bytes cross PCIe in their stored size; a kernel converts them after the copy).
--   qload synth build/tiny-llama --dtype f32 && qload load examples/recipes/gpu_bf16.lua
return qload.recipe {
  source  = "../../build/tiny-llama",
  devices = "cuda:0",
  dtype   = "bf16",
  io      = { queue_depth = 16, chunk = "8MiB", staging = "128MiB" },
}

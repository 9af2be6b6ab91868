-- Two pipeline stages: whole decoder layers per device, in order (cpu:N are separate host
-- arenas, standing in for GPUs: write "cuda:0", "cuda:1" on a machine that has them). The
-- embeddings go with the first stage, the final norm and lm_head with the last.
--   qload synth build/tiny-llama && qload load examples/recipes/pipeline.lua --dump /tmp/stages
return qload.recipe {
  source   = "../../build/tiny-llama",
  devices  = { "cpu:0", "cpu:1" },
  parallel = { pipeline = 2 },
}

-- Two tensor-parallel ranks in each of two pipeline stages (cpu:N are separate host arenas,
-- standing in for GPUs: write "cuda:0" ... "cuda:3" on a machine that has them). Each rank
-- gets its shard of every tensor by the llama-style rules: attention by heads (key/value
-- heads replicated when there are fewer than ranks), gate/up and the vocabulary by rows,
-- o_proj and down_proj by columns, norms replicated. The checkpoint is still read once.
--   qload synth build/tiny-llama && qload load examples/recipes/tensor_parallel.lua --dump /tmp/ranks
return qload.recipe {
  source   = "../../build/tiny-llama",
  devices  = { "cpu:0", "cpu:1", "cpu:2", "cpu:3" },  -- stage 0: cpu:0, cpu:1; stage 1: cpu:2, cpu:3
  parallel = {
    tensor   = 2,
    pipeline = 2,
    rules    = { { match = "lm_head.*", split = "replicate" } },  -- override one default
  },
}

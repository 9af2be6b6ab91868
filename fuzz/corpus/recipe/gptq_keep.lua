-- A GPTQ checkpoint: keep the packed weights as they are for a server's own kernels, except
-- the MLP down projections, which are repacked to GPTQ v2 with contiguous groups, and the
-- attention output projections, dequantized to bf16. `qload plan` shows the result per tensor.
--   qload synth build/tiny-gptq --intermediate 768 --quant gptq4 && qload load examples/recipes/gptq_keep.lua
return qload.recipe {
  source  = "../../build/tiny-gptq",
  devices = "cpu",
  quant   = {
    { match = "*.mlp.down_proj.weight",   repack = true },
    { pattern = "self_attn%.o_proj",      dequantize = "bf16" },
    { match = "*",                        keep = true },
  },
}

-- Quantize a bf16 llama's attention and MLP projections to FP8 E4M3 with 128x128 block scales
-- on load (DeepSeek-V3 layout: <p>.weight plus <p>.weight_scale_inv), leaving embeddings,
-- norms and lm_head as stored, using qload's presets.
--   qload synth build/tiny-llama && qload load examples/recipes/fp8_on_load.lua
local presets = require("qload.presets")
return qload.recipe {
  source  = "../../build/tiny-llama",
  devices = "cpu",
  quant   = presets.llama_quantize("fp8:block"),
}

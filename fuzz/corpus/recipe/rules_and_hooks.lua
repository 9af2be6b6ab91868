return qload.recipe {
  source = "m",
  devices = { "cpu", "cpu:1" },
  placement = function(name) if name:find("layers%.0") then return "cpu:1" end return "cpu" end,
  quant = {
    { match = "lm_head.*", keep = true },
    { pattern = "self_attn%.[qk]_proj", quantize = "fp8:block" },
    { match = "*.mlp.*", dequantize = "bf16" },
  },
  parallel = { tensor = 2, rules = { { pattern = "q_proj", split = "rows" } } },
  settings = { staging_bytes = "64MiB", verify = true },
}

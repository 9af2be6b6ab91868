local n = 0
return qload.recipe {
  source = "m",
  quant = function(name)
    n = n + 1
    if string.match(name, "^model%.layers%.(%d+)%.") then return { quantize = "int8" } end
    return { keep = true }
  end,
}

-- A helper module the example recipes share (`require("lib.llama")` from this folder):
-- where llama-style checkpoints keep their layers, and a placement function built on it.
local M = {}

-- The decoder layer of a tensor name ("model.layers.12.mlp..." -> 12), or nil.
function M.layer(name)
  return tonumber(name:match("%.layers%.(%d+)%."))
end

-- A placement function: layers [0, split) on `first`, the rest on `second`; embeddings with
-- the first layers, the final norm and lm_head with the last.
function M.split_at(split, first, second)
  return function(name)
    local layer = M.layer(name)
    if layer ~= nil then return layer < split and first or second end
    if name:find("embed", 1, true) then return first end
    return second
  end
end

return M

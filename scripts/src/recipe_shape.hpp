// The shape of a qload.recipe{...} table: what qload.recipe checks where it is called, before
// parse_recipe reads the table's meaning (device names, dtypes, rule actions).
#pragma once

#include <string>

struct lua_State;

namespace qload::scripts {

// Checks the table at stack index 1 of `L`: its keys (a misspelt one gets a did-you-mean), the
// type of each field, the io and parallel tables' keys and types, and the quant and
// parallel.rules lists' rules. "" when it is well formed; otherwise the message, with `blamed`
// set to the key at fault (the caller finds its line in the recipe's text: qload.recipe is
// called in a tail call, whose frame Lua no longer knows). `source_given`: the caller names the
// checkpoint, so `source` may be absent.
std::string check_recipe_shape(lua_State* L, bool source_given, std::string& blamed);

}  // namespace qload::scripts

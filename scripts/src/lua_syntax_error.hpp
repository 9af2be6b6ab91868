// LuaJIT's syntax errors end in " near '<token>'", the token being the bytes the lexer stopped
// at: when a file given as a recipe or module is not Lua at all (a credentials file, say), that
// is the file's contents ("'=' expected near 'hunter2'", issue 45 finding 12). An error about a
// file names the file, the line and what was expected, never what the file holds.
#pragma once

#include <string>
#include <string_view>

namespace qload::scripts::detail {

// `message` ("file:line: what near 'token'") without the quoted token. The first " near '" is
// where LuaJIT's own text ends (its messages never contain one; a chunk name that did would
// only make the cut earlier, dropping more, never showing the file's bytes). "near <eof>" holds
// no contents and is kept.
inline std::string without_quoted_token(std::string_view message) {
  const std::size_t near = message.find(" near '");
  if (near == std::string_view::npos) return std::string(message);
  return std::string(message.substr(0, near)) + " (the text there is not shown)";
}

}  // namespace qload::scripts::detail

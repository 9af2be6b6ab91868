// Move-only owner of a LuaJIT state. Recipes (a later issue) run in one of these; for now it
// also lets `qload --version` prove the interpreter is linked and working.
#pragma once

#include <string>

#include "qload/runtime/error.hpp"

struct lua_State;

namespace qload::scripts {

class LuaState {
 public:
  // A fresh state with only the safe base libraries (base, string, table, math) opened.
  static Result<LuaState> create();

  LuaState(LuaState&& other) noexcept;
  LuaState& operator=(LuaState&& other) noexcept;
  LuaState(const LuaState&) = delete;
  LuaState& operator=(const LuaState&) = delete;
  ~LuaState();

  lua_State* get() const noexcept { return state_; }

  // Runs `chunk` (text only, never bytecode) named `chunk_name` in protected mode and returns
  // its first result converted to a string. Errors carry Lua's message with file and line.
  Result<std::string> eval_to_string(const std::string& chunk, const std::string& chunk_name);

 private:
  explicit LuaState(lua_State* state) : state_(state) {}
  lua_State* state_ = nullptr;
};

// "LuaJIT 2.1.0-beta3"
std::string luajit_version();

}  // namespace qload::scripts

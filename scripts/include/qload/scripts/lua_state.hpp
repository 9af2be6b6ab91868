// Move-only owner of a sandboxed LuaJIT state, the place recipes run.
//
// The sandbox (../shared/style.md, security.md section 5): only the base, string, table and
// math libraries, minus everything that loads code or reaches outside (load*, dofile,
// require, string.dump, getfenv/setfenv, collectgarbage, newproxy); text chunks only;
// the JIT off, so the instruction-count hook fires everywhere (LuaJIT skips hooks inside
// compiled traces); an instruction budget, a wall-clock deadline and a memory cap through the
// state's allocator. A hook cannot interrupt a C function, so the one family of C functions
// whose time a recipe controls, Lua's pattern matching (string.find/match/gmatch/gsub), is
// replaced by a matcher that charges its steps to the same budget (pattern/lua_pattern.hpp); the
// other C functions' work is linear in sizes the memory cap bounds.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "qload/runtime/error.hpp"

struct lua_State;

namespace qload::scripts {

struct SandboxLimits {
  std::uint64_t max_instructions = 100'000'000;  // recipes are data plus small plan-time hooks
  std::chrono::milliseconds max_wall_time{5000};
  std::size_t max_memory_bytes = std::size_t{256} << 20;
};

class LuaState {
 public:
  static Result<LuaState> create(const SandboxLimits& limits = {});

  LuaState(LuaState&& other) noexcept;
  LuaState& operator=(LuaState&& other) noexcept;
  LuaState(const LuaState&) = delete;
  LuaState& operator=(const LuaState&) = delete;
  ~LuaState();

  lua_State* get() const noexcept { return state_; }

  // Loads `chunk` (text only, never bytecode) named `chunk_name` and runs it in protected
  // mode under the sandbox limits, leaving its `results` return values on the stack.
  // Errors carry Lua's message (with file and line), name the chunk as the file, and note the
  // traceback when the error came through more than one Lua function.
  Status run(const std::string& chunk, const std::string& chunk_name, int results);

  // Calls the function under `nargs` arguments on the stack in protected mode, under fresh
  // sandbox limits, leaving `results` values (a plan-time hook). Errors as run(), with the Lua
  // frames the error passed through added as a one-line note ("traceback: ...").
  Status call(int nargs, int results, const std::string& chunk_name);

  // run() and convert the first result to a string (as Lua's tostring would).
  Result<std::string> eval_to_string(const std::string& chunk, const std::string& chunk_name);

  // The limit bookkeeping shared with the allocator and the hook (stable address).
  struct Budget;

 private:
  LuaState(lua_State* state, std::unique_ptr<Budget> budget);
  lua_State* state_ = nullptr;
  std::unique_ptr<Budget> budget_;
};

// "LuaJIT 2.1.0-beta3"
std::string luajit_version();

}  // namespace qload::scripts

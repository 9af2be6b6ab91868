#include "qload/scripts/lua_state.hpp"

#include <cstdio>
#include <cstdlib>
#include <lua.hpp>  // extern "C" around lua.h, lauxlib.h, lualib.h and luajit.h
#include <string>
#include <string_view>
#include <utility>

#include "lua_syntax_error.hpp"
#include "pattern/lua_pattern.hpp"

namespace qload::scripts {

struct LuaState::Budget {
  SandboxLimits limits;
  std::size_t memory_bytes = 0;
  std::uint64_t instructions = 0;
  std::chrono::steady_clock::time_point deadline;
};

namespace {

constexpr int kHookEvery = 10000;  // instructions between hook calls
const char kBudgetKey = 0;         // registry key (its address) for the Budget pointer

// lua_Alloc with a memory cap: returning NULL makes Lua raise "not enough memory".
void* capped_alloc(void* ud, void* ptr, std::size_t old_size, std::size_t new_size) {
  auto* budget = static_cast<LuaState::Budget*>(ud);
  if (new_size == 0) {
    std::free(ptr);
    budget->memory_bytes -= ptr ? old_size : 0;
    return nullptr;
  }
  const std::size_t old_bytes = ptr ? old_size : 0;
  if (new_size > old_bytes && budget->memory_bytes + (new_size - old_bytes) > budget->limits.max_memory_bytes)
    return nullptr;
  void* out = std::realloc(ptr, new_size);
  if (out != nullptr) budget->memory_bytes = budget->memory_bytes - old_bytes + new_size;
  return out;
}

LuaState::Budget* budget_of(lua_State* L) {
  lua_pushlightuserdata(L, const_cast<char*>(&kBudgetKey));
  lua_rawget(L, LUA_REGISTRYINDEX);
  auto* budget = static_cast<LuaState::Budget*>(lua_touserdata(L, -1));
  lua_pop(L, 1);
  return budget;
}

// Whether the instruction budget is spent or the deadline has passed; if so, `message` says
// which. lua_pushfstring knows no 64-bit formats: hence snprintf into the caller's buffer.
bool over_limits(const LuaState::Budget& budget, char* message, std::size_t size) {
  if (budget.instructions > budget.limits.max_instructions) {
    std::snprintf(message, size, "recipe exceeded its budget of %llu instructions",
                  static_cast<unsigned long long>(budget.limits.max_instructions));
    return true;
  }
  if (std::chrono::steady_clock::now() > budget.deadline) {
    std::snprintf(message, size, "recipe exceeded its time limit of %lld ms",
                  static_cast<long long>(budget.limits.max_wall_time.count()));
    return true;
  }
  return false;
}

void limit_hook(lua_State* L, lua_Debug*) {
  LuaState::Budget* budget = budget_of(L);
  budget->instructions += kHookEvery;
  char message[96];  // no C++ object may be alive when luaL_error unwinds
  if (over_limits(*budget, message, sizeof message)) luaL_error(L, "%s", message);
}

// The guarded string functions' matching steps count as instructions: a pattern bomb, which
// the hook cannot interrupt (it runs in C), meets the same limits as a loop in Lua.
bool charge_pattern_steps(lua_State* L, std::uint64_t steps, char* message, std::size_t size) {
  LuaState::Budget* budget = budget_of(L);
  if (budget == nullptr) return true;
  budget->instructions += steps;
  return !over_limits(*budget, message, size);
}
const lua_pattern::Charger kPatternCharger{&charge_pattern_steps};

// Replaces string.find/match/gmatch/gsub with the metered ones (lua_pattern.hpp).
bool guard_patterns(lua_State* L) {
  lua_pushcfunction(L, lua_pattern::open_guarded_patterns);
  lua_pushlightuserdata(L, const_cast<lua_pattern::Charger*>(&kPatternCharger));
  return lua_pcall(L, 1, 0, 0) == 0;
}

// Opens one standard library through a protected call (lua_call would abort on failure).
bool open_lib(lua_State* L, lua_CFunction open, const char* name) {
  lua_pushcfunction(L, open);
  lua_pushstring(L, name);
  return lua_pcall(L, 1, 0, 0) == 0;
}

void remove_unsafe_globals(lua_State* L) {
  for (const char* name : {"dofile", "loadfile", "load", "loadstring", "require", "module", "collectgarbage", "getfenv",
                           "setfenv", "newproxy", "gcinfo"}) {
    lua_pushnil(L);
    lua_setglobal(L, name);
  }
  lua_getglobal(L, "string");
  lua_pushnil(L);
  lua_setfield(L, -2, "dump");
  lua_pop(L, 1);
}

// Separates an error message from the frames traceback_handler appends.
constexpr std::string_view kFramesMark =
    "\x01"
    "frames: ";

// lua_pcall's message handler: appends the Lua frames the error passed through, as one line
// ("r.lua:3 in function 'f' <- r.lua:9 in main chunk"), when there are at least two (a single
// frame is already the message's file:line). C frames and the handler's own are left out.
int traceback_handler(lua_State* L) {
  const char* message = lua_tostring(L, 1);
  if (message == nullptr) message = "(error object is not a string)";
  luaL_traceback(L, L, nullptr, 1);
  const std::string trace = lua_tostring(L, -1) ? lua_tostring(L, -1) : "";
  lua_pop(L, 1);
  std::string frames;
  int count = 0;
  std::size_t at = 0;
  while (at < trace.size()) {
    std::size_t end = trace.find('\n', at);
    if (end == std::string::npos) end = trace.size();
    std::string line = trace.substr(at, end - at);
    at = end + 1;
    line.erase(0, line.find_first_not_of(" \t"));
    if (line.empty() || line.starts_with("stack traceback") || line.starts_with("[C]")) continue;
    if (line.ends_with(':')) line.pop_back();
    frames += (count++ == 0 ? "" : " <- ") + line;
  }
  if (count < 2) {
    lua_pushstring(L, message);
  } else {
    const std::string out = std::string(message) + std::string(kFramesMark) + frames;
    lua_pushlstring(L, out.data(), out.size());
  }
  return 1;
}

}  // namespace

LuaState::LuaState(lua_State* state, std::unique_ptr<Budget> budget) : state_(state), budget_(std::move(budget)) {}

Result<LuaState> LuaState::create(const SandboxLimits& limits) {
  auto budget = std::make_unique<Budget>();
  budget->limits = limits;
  lua_State* L = lua_newstate(capped_alloc, budget.get());
  if (L == nullptr) return fail(Errc::kOutOfMemory, "creating a Lua state failed");
  LuaState state(L, std::move(budget));
  if (!open_lib(L, luaopen_base, "") || !open_lib(L, luaopen_string, LUA_STRLIBNAME) ||
      !open_lib(L, luaopen_table, LUA_TABLIBNAME) || !open_lib(L, luaopen_math, LUA_MATHLIBNAME))
    return fail(Errc::kInternal, "opening the Lua base libraries failed");
  if (!guard_patterns(L)) return fail(Errc::kInternal, "installing the metered string functions failed");
  remove_unsafe_globals(L);
  luaJIT_setmode(L, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_OFF);
  lua_pushlightuserdata(L, const_cast<char*>(&kBudgetKey));
  lua_pushlightuserdata(L, state.budget_.get());
  lua_rawset(L, LUA_REGISTRYINDEX);
  return state;
}

LuaState::LuaState(LuaState&& other) noexcept
    : state_(std::exchange(other.state_, nullptr)), budget_(std::move(other.budget_)) {}
LuaState& LuaState::operator=(LuaState&& other) noexcept {
  if (this != &other) {
    if (state_) lua_close(state_);
    state_ = std::exchange(other.state_, nullptr);
    budget_ = std::move(other.budget_);
  }
  return *this;
}
LuaState::~LuaState() {
  if (state_) lua_close(state_);  // before budget_ goes: closing frees through the allocator
}

Status LuaState::run(const std::string& chunk, const std::string& chunk_name, int results) {
  lua_State* L = state_;
  // LuaJIT's luaL_loadbuffer has no mode argument: refuse bytecode by its marker byte.
  if (!chunk.empty() && chunk[0] == '\x1b')
    return fail(Error(Errc::kInvalidArgument, "precompiled bytecode is refused").with_file(chunk_name));
  const std::string name = "@" + chunk_name;
  if (luaL_loadbuffer(L, chunk.data(), chunk.size(), name.c_str()) != 0) {
    std::string message = detail::without_quoted_token(lua_tostring(L, -1) ? lua_tostring(L, -1) : "unknown Lua error");
    lua_pop(L, 1);
    return fail(Error(Errc::kInvalidArgument, std::move(message)).with_file(chunk_name));
  }
  return call(0, results, chunk_name);
}

Status LuaState::call(int nargs, int results, const std::string& chunk_name) {
  lua_State* L = state_;
  const int base = lua_gettop(L) - nargs;  // the function's slot
  lua_pushcfunction(L, traceback_handler);
  lua_insert(L, base);
  budget_->instructions = 0;
  budget_->deadline = std::chrono::steady_clock::now() + budget_->limits.max_wall_time;
  lua_sethook(L, limit_hook, LUA_MASKCOUNT, kHookEvery);
  const bool ok = lua_pcall(L, nargs, results, base) == 0;
  lua_sethook(L, nullptr, 0, 0);
  if (!ok) {
    // The handler left "message\n<frames>": the message, then one note of the frames.
    const std::string text = lua_tostring(L, -1) ? lua_tostring(L, -1) : "unknown Lua error";
    lua_settop(L, base - 1);
    lua_gc(L, LUA_GCCOLLECT, 0);  // LuaJIT has no emergency GC: free what a failed chunk left
    const std::size_t cut = text.find(kFramesMark);
    if (cut == std::string::npos) return fail(Error(Errc::kInvalidArgument, text).with_file(chunk_name));
    return fail(Error(Errc::kInvalidArgument, text.substr(0, cut))
                    .with_note("traceback: " + text.substr(cut + kFramesMark.size()))
                    .with_file(chunk_name));
  }
  lua_remove(L, base);
  return {};
}

Result<std::string> LuaState::eval_to_string(const std::string& chunk, const std::string& chunk_name) {
  lua_State* L = state_;
  const int top = lua_gettop(L);
  QLOAD_TRY(run(chunk, chunk_name, 1));
  lua_getglobal(L, "tostring");
  lua_insert(L, -2);
  if (lua_pcall(L, 1, 1, 0) != 0) {
    lua_settop(L, top);
    return fail(Error(Errc::kInvalidArgument, "result has no string form").with_file(chunk_name));
  }
  size_t len = 0;
  const char* text = lua_tolstring(L, -1, &len);
  std::string out = text ? std::string(text, len) : std::string();
  lua_settop(L, top);
  return out;
}

std::string luajit_version() {
  return LUAJIT_VERSION;
}

}  // namespace qload::scripts

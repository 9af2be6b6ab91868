#include "qload/scripts/lua_state.hpp"

#include <lua.hpp>  // extern "C" around lua.h, lauxlib.h, lualib.h and luajit.h

#include <utility>

namespace qload::scripts {
namespace {

// Opens one standard library through a protected call (lua_call would abort on failure).
bool open_lib(lua_State* L, lua_CFunction open, const char* name) {
  lua_pushcfunction(L, open);
  lua_pushstring(L, name);
  return lua_pcall(L, 1, 0, 0) == 0;
}

}  // namespace

Result<LuaState> LuaState::create() {
  lua_State* L = luaL_newstate();
  if (L == nullptr) return fail(Errc::kOutOfMemory, "luaL_newstate failed");
  LuaState state(L);
  if (!open_lib(L, luaopen_base, "") || !open_lib(L, luaopen_string, LUA_STRLIBNAME) ||
      !open_lib(L, luaopen_table, LUA_TABLIBNAME) || !open_lib(L, luaopen_math, LUA_MATHLIBNAME))
    return fail(Errc::kInternal, "opening the Lua base libraries failed");
  return state;
}

LuaState::LuaState(LuaState&& other) noexcept : state_(std::exchange(other.state_, nullptr)) {}
LuaState& LuaState::operator=(LuaState&& other) noexcept {
  if (this != &other) {
    if (state_) lua_close(state_);
    state_ = std::exchange(other.state_, nullptr);
  }
  return *this;
}
LuaState::~LuaState() {
  if (state_) lua_close(state_);
}

Result<std::string> LuaState::eval_to_string(const std::string& chunk, const std::string& chunk_name) {
  lua_State* L = state_;
  const int top = lua_gettop(L);
  // Mode "t" is not in LuaJIT's luaL_loadbuffer, so reject binary chunks by their marker.
  if (!chunk.empty() && chunk[0] == '\x1b') return fail(Errc::kInvalidArgument, "bytecode chunks are refused");
  const std::string name = "@" + chunk_name;
  if (luaL_loadbuffer(L, chunk.data(), chunk.size(), name.c_str()) != 0 || lua_pcall(L, 0, 1, 0) != 0) {
    std::string message = lua_tostring(L, -1) ? lua_tostring(L, -1) : "unknown Lua error";
    lua_settop(L, top);
    return fail(Error(Errc::kInvalidArgument, std::move(message)).with_file(chunk_name));
  }
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

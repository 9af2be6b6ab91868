// The LuaJIT state owner: safe libraries only, protected calls, errors with file and line.
#include <catch2/catch.hpp>

#include <lua.hpp>

#include "qload/scripts/lua_state.hpp"

using namespace qload;

TEST_CASE("a Lua state evaluates a chunk and returns its result as text", "[scripts][lua]") {
  auto L = scripts::LuaState::create();
  REQUIRE(L);
  CHECK(L->eval_to_string("return 6 * 7", "t.lua").value() == "42");
  CHECK(L->eval_to_string("return string.rep('ab', 3)", "t.lua").value() == "ababab");
  CHECK(L->eval_to_string("return table.concat({1, 2, 3}, ',')", "t.lua").value() == "1,2,3");
  CHECK(L->eval_to_string("return math.floor(2.5)", "t.lua").value() == "2");
}

TEST_CASE("recipe states have no io, os, ffi, debug or package", "[scripts][lua]") {
  auto L = scripts::LuaState::create().value();
  for (const char* lib : {"io", "os", "ffi", "debug", "package", "require", "jit"}) {
    INFO(lib);
    CHECK(L.eval_to_string(std::string("return type(") + lib + ")", "t.lua").value() == "nil");
  }
}

TEST_CASE("Lua errors come back as values naming the chunk and line", "[scripts][lua]") {
  auto L = scripts::LuaState::create().value();
  auto runtime_error = L.eval_to_string("local x = 1\nerror('boom')", "recipe.lua");
  REQUIRE_FALSE(runtime_error);
  CHECK_THAT(runtime_error.error().message(), Catch::Contains("recipe.lua:2") && Catch::Contains("boom"));
  CHECK(runtime_error.error().file() == "recipe.lua");

  auto syntax_error = L.eval_to_string("return (", "bad.lua");
  REQUIRE_FALSE(syntax_error);
  CHECK_THAT(syntax_error.error().message(), Catch::Contains("bad.lua:1"));

  // The state stays usable after errors (the stack was restored).
  CHECK(L.eval_to_string("return 1 + 1", "t.lua").value() == "2");
}

TEST_CASE("precompiled bytecode is refused", "[scripts][lua]") {
  auto L = scripts::LuaState::create().value();
  auto r = L.eval_to_string(std::string("\x1bLJ\x02\x00", 5), "evil.lua");
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::kInvalidArgument);

  // Real bytecode (string.dump in a plain LuaJIT state) behind a "#!" line or a UTF-8 BOM,
  // which a check of the first byte alone would let through to the loader.
  lua_State* plain = luaL_newstate();
  REQUIRE(plain != nullptr);
  luaL_openlibs(plain);
  REQUIRE(luaL_dostring(plain, "return string.dump(function() return 'BYTECODE_RAN' end)") == 0);
  std::size_t length = 0;
  const char* dumped = lua_tolstring(plain, -1, &length);
  const std::string bytecode(dumped, length);
  lua_close(plain);
  REQUIRE(bytecode.starts_with("\x1bLJ"));
  for (const std::string& chunk :
       {bytecode, "#!/usr/bin/env luajit\n" + bytecode, "\xef\xbb\xbf" + bytecode, "\xef\xbb\xbf#!x\n" + bytecode}) {
    auto ran = L.eval_to_string(chunk, "evil.lua");
    REQUIRE_FALSE(ran);
    CHECK_THAT(ran.error().to_string(), !Catch::Contains("BYTECODE_RAN"));
    INFO(ran.error().to_string());
  }
}

TEST_CASE("LuaJIT version is reported", "[scripts][lua]") {
  CHECK_THAT(scripts::luajit_version(), Catch::StartsWith("LuaJIT 2."));
}

TEST_CASE("the sandbox stops runaway recipes: instructions, time and memory", "[scripts][lua][sandbox]") {
  scripts::SandboxLimits limits;
  limits.max_instructions = 2'000'000;
  limits.max_memory_bytes = 8u << 20;
  auto L = scripts::LuaState::create(limits).value();

  auto loop = L.run("while true do end", "spin.lua", 0);  // with the JIT on, hooks would never fire
  REQUIRE_FALSE(loop);
  CHECK_THAT(loop.error().message(), Catch::Contains("instructions"));

  auto hog = L.run("local t = {} for i = 1, 1e8 do t[i] = tostring(i) end", "hog.lua", 0);
  REQUIRE_FALSE(hog);
  CHECK_THAT(hog.error().message(), Catch::Contains("memory") || Catch::Contains("instructions"));

  auto rep = L.run("local s = string.rep('x', 1e9)", "rep.lua", 0);
  REQUIRE_FALSE(rep);
  CHECK_THAT(rep.error().message(), Catch::Contains("memory"));

  scripts::SandboxLimits slow;
  slow.max_wall_time = std::chrono::milliseconds(50);
  auto S = scripts::LuaState::create(slow).value();
  auto timed = S.run("while true do end", "slow.lua", 0);
  REQUIRE_FALSE(timed);
  CHECK_THAT(timed.error().message(), Catch::Contains("time limit"));

  // After any of these the state still works.
  CHECK(L.eval_to_string("return 'alive'", "t.lua").value() == "alive");
}

TEST_CASE("the sandbox hides code loading and escape hatches", "[scripts][lua][sandbox]") {
  auto L = scripts::LuaState::create().value();
  for (const char* expr : {"load", "loadstring", "dofile", "loadfile", "require", "getfenv", "setfenv",
                           "collectgarbage", "newproxy", "string.dump", "('x').dump"}) {
    INFO(expr);
    CHECK(L.eval_to_string(std::string("return type(") + expr + ")", "t.lua").value() == "nil");
  }
}

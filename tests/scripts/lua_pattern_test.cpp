// The sandbox's metered string.find/match/gmatch/gsub (scripts/src/pattern/lua_pattern.cpp, issue 18):
// LuaJIT's own results case for case, and pattern bombs that meet the recipe's limits.
#include <catch2/catch.hpp>

#include <chrono>
#include <lua.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "qload/scripts/lua_state.hpp"
#include "qload/scripts/recipe.hpp"

using namespace qload;
using namespace std::chrono_literals;
using Action = scheduler::WeightPolicy::Action;

namespace {

// Runs every case through string.find, match, gmatch and gsub and returns one line per call:
// "call(arguments) = results", results as "count:values" or "error:message".
const char* const kCrossCheck = R"LUA(
local function show(v)
  if type(v) == "string" then return string.format("%q", v) end
  return tostring(v)
end
local function pack(...) return { n = select("#", ...), ... } end
local function ser(r)
  local parts = {}
  for i = 1, r.n do parts[i] = show(r[i]) end
  return r.n .. ":" .. table.concat(parts, ",")
end
local function call(f, ...)
  local r = pack(pcall(f, ...))
  if not r[1] then return "error:" .. tostring(r[2]) end
  return ser(pack(unpack(r, 2, r.n)))
end
local function gmatch_all(s, p)
  local out = {}
  local it = string.gmatch(s, p)
  for _ = 1, 40 do
    local r = pack(it())
    out[#out + 1] = ser(r)
    if r.n == 0 or r[1] == nil then break end
  end
  return table.concat(out, " ")
end
local function args(...)
  local r = pack(...)
  return ser(r)
end

local all = {}
for i = 0, 255 do all[#all + 1] = string.char(i) end
all = table.concat(all)
local text = "The quick (brown) fox, [jumps] over 13 lazy dogs; x=0x1F, y = -2.5e3! \t\n\"q\" 'r' \0end"

local cases = {
  -- anchors and positions
  { "hello world", "^hello" }, { "hello world", "^world" }, { "hello world", "world$" },
  { "hello world", "hello$" }, { "hello", "^hello$" }, { "", "^$" }, { "", "" }, { "abc", "" },
  { "abc", "", 2 }, { "abc", "", 4 }, { "abc", "", 5 }, { "abc", "", 10 }, { "abc", "", -1 },
  { "abc", "", -10 }, { "abc", "b", 0 }, { "abc", "c", -1 }, { "abc", "a", -1 }, { "abc", "a", -3 },
  { "abc", "a", -4 }, { "abc", "b", 1e10 }, { "abc", "b", 2^31 }, { "abc", "b", -2^31 }, { "abc", "b", 2.9 },
  { "abc", "b", "2" }, { "abc", "^b", 2 }, { "a$b", "a$b" }, { "a$b", "%$" }, { "a$", "a$" },
  { "a^b", "a^b" }, { "^a", "^^a" }, { "aaa", "^a" }, { "abc", "$" }, { "abc", "^" },
  -- character classes, escapes, '.'
  { text, "%a+" }, { text, "%A+" }, { text, "%c+" }, { text, "%C+" }, { text, "%d+" }, { text, "%D+" },
  { text, "%g+" }, { text, "%G+" }, { text, "%l+" }, { text, "%L+" }, { text, "%p+" }, { text, "%P+" },
  { text, "%s+" }, { text, "%S+" }, { text, "%u+" }, { text, "%U+" }, { text, "%w+" }, { text, "%W+" },
  { text, "%x+" }, { text, "%X+" }, { text, "%z" }, { text, "%Z+" }, { text, "%.%d" }, { text, "%(.-%)" },
  { text, "%[(.-)%]" }, { text, "%%" }, { "50%", "%d+%%" }, { text, "x=(0x%x+)" }, { text, "%-?%d+%.?%d*e?%d*" },
  { "a.b", "a.b" }, { "axb", "a.b" }, { "a\nb", "a.b" }, { text, ".-;" }, { "a\0b", "%z" },
  { "a\0b", "\0b" }, { "a\0b", "[%z]" }, { "a\0b", "%Z+" }, { "\0\0", "\0*" }, { "a\0b", "a.b" },
  { "caf\195\169 ok", "%a+" }, { "\200\201x", "[\200-\210]+" }, { "\255", "%W" }, { "\255", "%p" },
  { 12345, 3 }, { 12345, "%d%d$" }, { "x@y", "%@" }, { "a`b", "%`" },
  -- sets
  { text, "[abc]+" }, { text, "[^abc ]+" }, { text, "[a-c]+" }, { text, "[%a_][%w_]*" }, { "a]b", "[]]" },
  { "a]b", "[^]]+" }, { "a-b", "[a-]+" }, { "a-b", "[-a]+" }, { "a-z", "[a%-z]+" }, { "a]b", "[%]]" },
  { text, "[^%s]+" }, { "abc", "[z-a]" }, { "a-e", "[a-c-e]+" }, { "9-", "[%d-]+" }, { "a.b", "[.]" },
  { "x^y", "[x^]+" }, { "x^y", "[^^]+" }, { text, "[%(%)]" }, { text, "[%p%s]+" }, { "abc", "[a" },
  { "abc", "[" }, { "abc", "[^]" }, { "abc", "[%" }, { "abc", "[a%" }, { "abc", "[]" }, { "a%b", "[%%]" },
  -- quantifiers
  { "aaab", "a*" }, { "aaab", "a+" }, { "aaab", "a-" }, { "aaab", "a?" }, { "aaab", "a-b" }, { "xaaab", ".-b" },
  { "xaaab", ".*b" }, { "abab", ".*b" }, { "abab", ".-b" }, { "xx", "x*$" }, { "aaabbb", "(a*)(b*)" },
  { "aaa", "a?a?a?aaa" }, { "aabc", "[ab]-c" }, { "3.14 2", "%d+%.?%d*" }, { "b", "a+" }, { "", "a*" },
  { "x", "x-$" }, { "+", "+" }, { "a+b", "a+b" }, { "a*b", "a*b" }, { "a?", "a?" }, { "-", "-" },
  -- captures
  { "hello", "(h)(e)(l)(l)(o)" }, { "ab", "((a)(b))" }, { "abc", "()" }, { "abc", "()b()" }, { "abc", "(b)()" },
  { "abc", "(" }, { "abc", "(a" }, { "abc", "(x" }, { "abc", "a)" }, { "abc", ")" }, { "abc", "b)" },
  { "abc", "(()" }, { "f(x) g(yy)", "%((%w+)%)" }, { string.rep("a", 32), string.rep("(a)", 32) },
  { string.rep("a", 33), string.rep("(a)", 33) }, { "key = value", "(%w+)%s*=%s*(%w+)" },
  -- back-references
  { "aa", "(a)%1" }, { "hello hello", "(%w+) %1" }, { [[say "hi" or 'yo']], [[(["'])(.-)%1]] },
  { "a", "%1" }, { "aa", "(a%1)" }, { "aa", "()a%1" }, { "a", "%0" }, { "aa", "(a)%2" }, { "hello", "(.)%1" },
  { "abab", "(ab)%1" }, { "xyzxyz", "(x(y)z)%1" }, { "ab", "(a)(b)%2" },
  -- %b
  { "f(a(b)c) d", "%b()" }, { "((a)(b)) (c", "%b()" }, { "abc", "%b" }, { "abc", "%ba" }, { "x(y", "%b()" },
  { "xay", "%bxy" }, { "[[x]] [y", "%b[]" }, { "a((b((c", "%b((" }, { ")(", "%b)(" }, { "if (a) then", "if %b() then" },
  -- %f
  { "THE (quick) fox", "%f[%a]%a+" }, { "hello world", "%f[%A]" }, { "x1 y22", "%f[%w]%w+" }, { "aaa", "%f[a]" },
  { "abc", "%f" }, { "abc", "%fa" }, { "abc", "%f[^%z]" }, { "abc", "%f[%z]" }, { "abc", "%f[]" }, { "", "%f[%z]" },
  { "the cat", "%f[%w]cat%f[%W]" }, { "concat", "%f[%w]cat%f[%W]" },
  -- malformed
  { "abc", "%" }, { "abc", "a%" }, { "abc", "%9" }, { "abc", "%bx" }, { "a", "a%" },
  { "a", "(()" }, { "a", "((a)" }, { "a", "%f[a" },
}

local out = {}
local function emit(name, a, result) out[#out + 1] = name .. "(" .. a .. ") = " .. result end
for _, c in ipairs(cases) do
  local s, p, init = c[1], c[2], c[3]
  local a = args(s, p, init)
  emit("find", a, call(string.find, s, p, init))
  emit("plain find", a, call(string.find, s, p, init, true))
  emit("match", a, call(string.match, s, p, init))
  emit("gmatch", a, call(gmatch_all, s, p))
  emit("gsub <%0>", a, call(string.gsub, s, p, "<%0>"))
  emit("gsub %1", a, call(string.gsub, s, p, "[%1]"))
  emit("gsub fn", a, call(string.gsub, s, p, function(...) return ser(pack(...)) end))
  emit("method find", a, call(function() return (s .. ""):find(p, init) end))
end

-- every byte through every class, in a set and alone
for cls in ("acdglpsuwxzACDGLPSUWXZ"):gmatch(".") do
  emit("class", cls, call(string.gsub, all, "%" .. cls, ""))
  emit("class set", cls, call(string.gsub, all, "[%" .. cls .. "]+", "."))
  emit("class not set", cls, call(string.gsub, all, "[^%" .. cls .. "]", ""))
end
emit("range", "", call(string.gsub, all, "[\1-\31\127-\255]", "?"))

local t = { hello = "HI", world = false, fox = 42, the = true }
local gsubs = {
  { "hello world", "o", "0" }, { "hello world", "o", "0", 1 }, { "hello world", "o", "0", 0 },
  { "hello world", "o", "0", -1 }, { "hello world", "o", "0", 1.5 }, { "hello world", "o", "0", "2" },
  { "hello world", "o", "0", 1e10 }, { "hello world", "o", "0", 2^32 + 1 }, { "hello world", "(o)", "[%1]" },
  { "hello world", "o", "%0%0" }, { "hello", "l", "%%" }, { "hello", "l", "%" }, { "hello", "l", "%a" },
  { "hello", "l", "%2" }, { "abc", "%w", "%1" }, { "abc", "(a)(b)", "%2%1" }, { "abc", "(a)()", "%2" },
  { "hello world", "%w+", t }, { "the fox", "%w+", t }, { "hello world", "(%w+)", t }, { "abc", "", "-" },
  { "abc", "%w*", "-" }, { "abc", "b*", "-" }, { "  trim me  ", "^%s*(.-)%s*$", "%1" }, { "abc", "^a", "x" },
  { "aaa", "^a", "x" }, { "aaa", "^", ">" }, { "aaa", "$", "<" }, { "aaa", "^$", "<" }, { "", "^$", "<" },
  { "abc", "b", 5 }, { 12321, 2, 9 }, { "abc", "x*", "-" }, { "hello world", "o*", "0" },
  { "hello world", "()(%w+)()", function(a, w, b) return w:upper() .. a .. b end },
  { "hello world", "%w+", function(w) return nil end }, { "hello world", "%w+", function(w) return false end },
  { "hello world", "%w+", function(w) return #w end }, { "hello world", "%w+", function(w) return {} end },
  { "hello world", "%w+", function() error("from the replacement") end },
  { "abc", ".", { a = 1, b = true } }, { "abc", "b" }, { "abc", "b", true }, { "abc", "b", "x", "many" },
  { "a,b,,c", ",", ";", 2 }, { "x = 1, y = 2", "(%w+) = (%w+)", "%2 = %1" }, { "abc", "%", "x" },
  { "abc", "(", "x" }, { "abc", "[a-", "x" }, { "abcabc", "b", "%0%0%0", 1 }, { "\0\0\0", "", "x" },
}
for i, g in ipairs(gsubs) do
  emit("gsub", i .. ":" .. args(g[1], g[2], type(g[3]) == "string" and g[3] or type(g[3]), g[4]),
       call(string.gsub, g[1], g[2], g[3], g[4]))
end

-- argument errors
emit("args", "find nil", call(string.find, nil, "a"))
emit("args", "find no pattern", call(string.find, "a"))
emit("args", "find bad init", call(string.find, "a", "a", "x"))
emit("args", "find table", call(string.find, "a", {}))
emit("args", "match nil", call(string.match, "a", nil))
emit("args", "gmatch nil", call(string.gmatch, nil, "a"))
emit("args", "gmatch number", call(gmatch_all, 1234, 2))
return table.concat(out, "\n")
)LUA";

// `chunk`'s string result in a plain LuaJIT state: the stock string library, unmetered.
std::string run_stock(const std::string& chunk) {
  lua_State* L = luaL_newstate();
  REQUIRE(L != nullptr);
  luaL_openlibs(L);
  std::string out;
  if (luaL_loadbuffer(L, chunk.data(), chunk.size(), "@cross.lua") != 0 || lua_pcall(L, 0, 1, 0) != 0) {
    out = std::string("chunk failed: ") + (lua_tostring(L, -1) ? lua_tostring(L, -1) : "?");
  } else {
    std::size_t length = 0;
    const char* text = lua_tolstring(L, -1, &length);
    out.assign(text ? text : "", text ? length : 0);
  }
  lua_close(L);
  return out;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

scripts::SandboxLimits bomb_limits() {
  scripts::SandboxLimits limits;
  limits.max_instructions = 1'000'000;
  limits.max_wall_time = 2s;
  return limits;
}

// Runs `chunk` in `L`, which must fail; returns the message and checks it failed fast.
std::string failure_of(scripts::LuaState& L, const std::string& chunk) {
  const auto start = std::chrono::steady_clock::now();
  auto r = L.run(chunk, "bomb.lua", 0);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  CHECK(elapsed < 10s);  // a loose bound: without the meter these run for hours
  REQUIRE_FALSE(r);
  return r.error().message();
}

const std::string kBomb = "string.rep('a*', 30) .. 'b'";
const std::string kSubject = "local s = string.rep('a', 5000)\n";

}  // namespace

TEST_CASE("the metered string functions give LuaJIT's results, case for case", "[scripts][lua][pattern]") {
  const std::string stock = run_stock(kCrossCheck);
  REQUIRE_THAT(stock, !Catch::StartsWith("chunk failed"));
  auto L = scripts::LuaState::create().value();
  auto metered = L.eval_to_string(kCrossCheck, "cross.lua");
  if (!metered) FAIL(metered.error().to_string());
  const auto want = lines_of(stock);
  const auto got = lines_of(*metered);
  CHECK(want.size() >= 1500);
  REQUIRE(got.size() == want.size());
  std::size_t differ = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (got[i] == want[i]) continue;
    ++differ;
    CHECK(got[i] == want[i]);
  }
  CHECK(differ == 0);
}

TEST_CASE("the metered functions replace string.* and the string methods", "[scripts][lua][pattern]") {
  auto L = scripts::LuaState::create().value();
  CHECK(L.eval_to_string("return tostring(getmetatable('').__index == string)", "t.lua").value() == "true");
  CHECK(L.eval_to_string("return ('hello'):gsub('l', 'L')", "t.lua").value() == "heLLo");
  CHECK(L.eval_to_string("return select(2, ('a.b'):find('.', 1, true))", "t.lua").value() == "2");
  CHECK(L.eval_to_string("local n = 0 for w in ('a b c'):gmatch('%a') do n = n + 1 end return n", "t.lua").value() ==
        "3");
  // LuaJIT prints its own library functions as "builtin#N"; the metered ones are closures.
  for (const char* name : {"find", "match", "gmatch", "gsub"}) {
    INFO(name);
    CHECK(L.eval_to_string(std::string("return tostring(string.") + name + "):find('builtin', 1, true) == nil", "t.lua")
              .value() == "true");
  }
}

TEST_CASE("pattern bombs meet the instruction limit in find, match, gmatch and gsub", "[scripts][lua][pattern]") {
  auto L = scripts::LuaState::create(bomb_limits()).value();
  const std::string bombs[] = {
      kSubject + "return string.find(s, " + kBomb + ")",
      kSubject + "return string.match(s, " + kBomb + ")",
      kSubject + "for x in string.gmatch(s, " + kBomb + ") do end",
      kSubject + "return string.gsub(s, " + kBomb + ", 'x')",
      kSubject + "return s:find(" + kBomb + ")",
      kSubject + "return s:gsub(" + kBomb + ", function(x) return x end)",
      kSubject + "return string.find(s, '(.-)%1b')",
      // A long subject: every start position costs, even with a cheap pattern.
      "return string.find(string.rep('a', 1e7), '[b-z]')",
      "return string.gsub(string.rep('a', 1e7), 'a', '%0')",
      "return string.find(string.rep('(', 1e6), '%b()')",
      // A long set makes each step expensive: each element is a step.
      "return string.find(string.rep('x', 1e4), '[' .. string.rep('a', 1e5) .. ']')",
      // Lua code inside gsub's replacement function still counts instructions.
      "return string.gsub(string.rep('a', 100), 'a', function() while true do end end)",
  };
  for (const std::string& bomb : bombs) {
    INFO(bomb);
    CHECK_THAT(failure_of(L, bomb), Catch::Contains("recipe exceeded its budget of 1000000 instructions"));
  }
  // The state still works, and ordinary matching is cheap enough for the same limits.
  CHECK(L.eval_to_string("return (string.gsub('model.layers.0.mlp', '%.(%d+)%.', '[%1]'))", "t.lua").value() ==
        "model.layers[0]mlp");
}

TEST_CASE("pattern bombs meet the time limit", "[scripts][lua][pattern]") {
  scripts::SandboxLimits limits;
  limits.max_instructions = std::uint64_t{1} << 62;
  limits.max_wall_time = 200ms;
  auto L = scripts::LuaState::create(limits).value();
  CHECK_THAT(failure_of(L, kSubject + "return string.find(s, " + kBomb + ")"),
             Catch::Contains("recipe exceeded its time limit of 200 ms"));
  CHECK_THAT(failure_of(L, "return string.find(string.rep('a', 1e7), '.-b')"), Catch::Contains("time limit"));
}

TEST_CASE("deep patterns are errors, never a crash", "[scripts][lua][pattern]") {
  auto L = scripts::LuaState::create(bomb_limits()).value();
  CHECK_THAT(failure_of(L, "return string.find('a', string.rep('(', 10000))"), Catch::Contains("too many captures"));
  CHECK_THAT(failure_of(L, "return string.find(string.rep('a', 1e5), string.rep('a?', 1e5))"),
             Catch::Contains("pattern too complex"));
  CHECK_THAT(
      failure_of(L, "return string.match(string.rep('a', 1e5), string.rep('(a?)', 30) .. string.rep('a?', 1e5))"),
      Catch::Contains("pattern too complex"));
  CHECK_THAT(failure_of(L, "return string.gsub(string.rep('b', 1000), string.rep('a?', 1e5), '')"),
             Catch::Contains("instructions"));
  // Nothing to recurse on: the items are tried in a loop, well within the limits.
  CHECK(L.eval_to_string("return string.find('', string.rep('a?', 1e4))", "t.lua").value() == "1");
}

TEST_CASE("string.rep past the memory cap fails cleanly", "[scripts][lua][pattern]") {
  scripts::SandboxLimits limits;
  limits.max_memory_bytes = 8u << 20;
  auto L = scripts::LuaState::create(limits).value();
  CHECK_THAT(failure_of(L, "local s = string.rep('ab', 1e8)"), Catch::Contains("memory"));
  CHECK_THAT(failure_of(L, "local s = string.rep('x', 1e6) s = s:gsub('.', '%0%0%0%0%0%0%0%0%0%0')"),
             Catch::Contains("memory"));
  CHECK(L.eval_to_string("return #string.rep('ab', 10)", "t.lua").value() == "20");
}

TEST_CASE("a recipe running a pattern bomb fails with the limit", "[scripts][recipe][pattern]") {
  const std::string text = kSubject + "string.find(s, " + kBomb + ")\nreturn qload.recipe { source = 'm' }";
  const auto start = std::chrono::steady_clock::now();
  auto r = scripts::parse_recipe(text, "bomb.lua", bomb_limits());
  CHECK(std::chrono::steady_clock::now() - start < 10s);
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message(), Catch::Contains("instructions"));
  CHECK(r.error().file() == "bomb.lua");
}

TEST_CASE("pattern rules match through the metered string.find", "[scripts][recipe][pattern]") {
  // The recipe replaces string.find: rules use the one from before it ran, the metered one.
  const std::string text = R"(
    string.find = function() error("the recipe's own find") end
    return qload.recipe {
      source = "m",
      quant = {
        { pattern = "self_attn%.[qk]_proj", keep = true },
        { pattern = "^lm_head%.", dequantize = "bf16" },
        { pattern = string.rep("a*", 30) .. "b", keep = true },
      },
    })";
  auto r = scripts::parse_recipe(text, "rules.lua", bomb_limits());
  if (!r) FAIL(r.error().to_string());
  auto q = r->weight_policy("model.layers.3.self_attn.q_proj.weight");
  REQUIRE(q);
  REQUIRE(q->has_value());
  CHECK((*q)->action == Action::kKeep);
  auto head = r->weight_policy("lm_head.weight");
  REQUIRE(head);
  REQUIRE(head->has_value());
  CHECK((*head)->action == Action::kDequantize);
  // The third rule is a bomb for a long run of 'a': the rule check meets the limit.
  auto bomb = r->weight_policy(std::string(5000, 'a'));
  REQUIRE_FALSE(bomb);
  CHECK_THAT(bomb.error().message(), Catch::Contains("instructions"));
  CHECK(r->weight_policy("model.norm.weight").value() == std::nullopt);
}

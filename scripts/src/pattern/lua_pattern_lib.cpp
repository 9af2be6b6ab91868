// LuaJIT 2.1's string.find, match, gmatch and gsub, argument for argument and result for
// result, on the budgeted Matcher (lua_pattern.hpp). Lua errors unwind through these functions:
// no object with a destructor may be alive when one is raised (Matcher and Payer have none).
#include <algorithm>
#include <cstring>
#include <lua.hpp>  // extern "C" around lua.h, lauxlib.h, lualib.h and luajit.h
#include <type_traits>

#include "lua_pattern.hpp"

namespace qload::scripts::lua_pattern {

namespace {

// Who pays a call's steps, and why they refused.
struct Payer {
  lua_State* L;
  const Charger* charger;
  char message[128];
};

bool charge_payer(void* context, std::uint64_t steps) {
  auto* payer = static_cast<Payer*>(context);
  return payer->charger->charge(payer->L, steps, payer->message, sizeof payer->message);
}

// Every closure has the Charger as its first upvalue.
Payer payer_for(lua_State* L) {
  Payer payer{L, static_cast<const Charger*>(lua_touserdata(L, lua_upvalueindex(1))), {}};
  return payer;
}

[[noreturn]] void raise_error(lua_State* L, const Matcher& m, const Payer& payer) {
  if (m.error() == PatternError::kOutOfSteps) luaL_error(L, "%s", payer.message);
  luaL_error(L, "%s", describe(m.error()));
  __builtin_unreachable();  // luaL_error does not return
}

// Charges what the matcher spent since its last charge; raises the error it stopped with.
void settle_or_raise(lua_State* L, Matcher& m, const Payer& payer) {
  if (!m.settle()) raise_error(L, m, payer);
}

// find's and match's init, read as LuaJIT's lj_lib_optint reads it: truncated to int32, and
// anything outside int32 (or NaN) as INT32_MIN, which is what x86's conversion gives.
std::int64_t init_argument(lua_State* L, int index) {
  if (lua_isnoneornil(L, index)) return 1;
  const lua_Number n = luaL_checknumber(L, index);
  if (n > -2147483649.0 && n < 2147483648.0) return static_cast<std::int32_t>(n);
  return INT32_MIN;
}

// A 1-based init (negative counts from the end) as an offset clamped to [0, length].
std::size_t start_offset(std::int64_t init, std::size_t length) {
  const std::int64_t start = init < 0 ? init + static_cast<std::int64_t>(length) : init - 1;
  if (start < 0) return 0;
  return std::min(static_cast<std::size_t>(start), length);
}

// LuaJIT's find searches plainly when the pattern has none of these (over its whole length).
bool has_specials(const char* pattern, std::size_t length) {
  for (std::size_t i = 0; i < length; ++i)
    if (pattern[i] != '\0' && std::strchr("^$*+?.([%-", pattern[i]) != nullptr) return true;
  return false;
}

// Capture `i` (or the whole match s..e when there are no captures and i is 0).
void push_capture(lua_State* L, const Matcher& m, int i, const char* s, const char* e) {
  if (i >= m.capture_count()) {
    if (i != 0) luaL_error(L, "%s", describe(PatternError::kInvalidCaptureIndex));
    lua_pushlstring(L, s, static_cast<std::size_t>(e - s));
    return;
  }
  const Capture& capture = m.capture(i);
  if (capture.length == kCaptureUnfinished) luaL_error(L, "unfinished capture");
  if (capture.length == kCapturePosition)
    lua_pushinteger(L, capture.start - m.subject() + 1);
  else
    lua_pushlstring(L, capture.start, static_cast<std::size_t>(capture.length));
}

// All captures; with none, the whole match s..e unless s is null (find's results).
int push_captures(lua_State* L, const Matcher& m, const char* s, const char* e) {
  const int count = m.capture_count() == 0 && s != nullptr ? 1 : m.capture_count();
  luaL_checkstack(L, count, "too many captures");
  for (int i = 0; i < count; ++i) push_capture(L, m, i, s, e);
  return count;
}

int find_plain(lua_State* L, Matcher& m, const Payer& payer, std::size_t start, const char* needle,
               std::size_t needle_length) {
  const char* at = m.find_plain(m.subject() + start, needle, needle_length);
  settle_or_raise(L, m, payer);
  if (at == nullptr) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushinteger(L, at - m.subject() + 1);
  lua_pushinteger(L, at - m.subject() + static_cast<std::ptrdiff_t>(needle_length));
  return 2;
}

int find_or_match(lua_State* L, bool find) {
  std::size_t length = 0;
  std::size_t pattern_length = 0;
  const char* subject = luaL_checklstring(L, 1, &length);
  const char* pattern = luaL_checklstring(L, 2, &pattern_length);
  const std::size_t start = start_offset(init_argument(L, 3), length);
  Payer payer = payer_for(L);
  Matcher m(subject, length, StepMeter{&charge_payer, &payer});
  if (find && (lua_toboolean(L, 4) || !has_specials(pattern, pattern_length)))
    return find_plain(L, m, payer, start, pattern, pattern_length);
  const bool anchored = *pattern == '^';
  if (anchored) ++pattern;
  for (std::size_t at = start;; ++at) {
    const char* s = subject + at;
    const char* e = m.match(s, pattern);
    if (e != nullptr) {
      settle_or_raise(L, m, payer);
      if (!find) return push_captures(L, m, s, e);
      lua_pushinteger(L, static_cast<lua_Integer>(at) + 1);
      lua_pushinteger(L, e - subject);
      return 2 + push_captures(L, m, nullptr, nullptr);
    }
    if (m.failed() || anchored || at >= length) break;
  }
  settle_or_raise(L, m, payer);
  lua_pushnil(L);
  return 1;
}

int l_find(lua_State* L) {
  return find_or_match(L, true);
}
int l_match(lua_State* L) {
  return find_or_match(L, false);
}

// The iterator: upvalues charger, subject, pattern, next offset. Like LuaJIT's, a '^' is an
// ordinary character here, and an empty match moves on by one.
int gmatch_next(lua_State* L) {
  std::size_t length = 0;
  const char* subject = lua_tolstring(L, lua_upvalueindex(2), &length);
  const char* pattern = lua_tostring(L, lua_upvalueindex(3));
  const auto from = static_cast<std::size_t>(lua_tointeger(L, lua_upvalueindex(4)));
  Payer payer = payer_for(L);
  Matcher m(subject, length, StepMeter{&charge_payer, &payer});
  for (std::size_t at = from; at <= length; ++at) {
    const char* s = subject + at;
    const char* e = m.match(s, pattern);
    if (e != nullptr) {
      settle_or_raise(L, m, payer);
      const std::ptrdiff_t next = (e - subject) + (e == s ? 1 : 0);
      lua_pushinteger(L, next);
      lua_replace(L, lua_upvalueindex(4));
      return push_captures(L, m, s, e);
    }
    if (m.failed()) break;
  }
  settle_or_raise(L, m, payer);
  return 0;
}

int l_gmatch(lua_State* L) {
  luaL_checkstring(L, 1);  // numbers become strings in place, as in LuaJIT
  luaL_checkstring(L, 2);
  lua_settop(L, 2);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_pushinteger(L, 0);
  lua_pushcclosure(L, gmatch_next, 4);
  return 1;
}

// A replacement string: "%0".."%9" are the match and its captures, "%" before anything else
// is that character (a trailing "%" adds the string's terminating NUL, as LuaJIT does).
void add_template(lua_State* L, luaL_Buffer* b, Matcher& m, const char* s, const char* e) {
  std::size_t length = 0;
  const char* text = lua_tolstring(L, 3, &length);
  if (!m.spend(1 + length / 16)) return;
  for (std::size_t i = 0; i < length; ++i) {
    if (text[i] != '%') {
      luaL_addchar(b, text[i]);
      continue;
    }
    const char c = text[++i];
    if (c < '0' || c > '9') {
      luaL_addchar(b, c);
    } else if (c == '0') {
      luaL_addlstring(b, s, static_cast<std::size_t>(e - s));
    } else {
      push_capture(L, m, c - '1', s, e);
      luaL_addvalue(b);
    }
  }
}

// gsub's replacement for the match s..e: from a template, a function or a table; nil or
// false keeps the original text.
void add_replacement(lua_State* L, luaL_Buffer* b, Matcher& m, const char* s, const char* e) {
  const int type = lua_type(L, 3);
  if (type == LUA_TNUMBER || type == LUA_TSTRING) {
    add_template(L, b, m, s, e);
    return;
  }
  if (type == LUA_TFUNCTION) {
    lua_pushvalue(L, 3);
    const int count = push_captures(L, m, s, e);
    lua_call(L, count, 1);  // inside the recipe's protected call: an error unwinds to it
  } else {
    push_capture(L, m, 0, s, e);
    lua_gettable(L, 3);
  }
  if (!lua_toboolean(L, -1)) {
    lua_pop(L, 1);
    lua_pushlstring(L, s, static_cast<std::size_t>(e - s));
  } else if (!lua_isstring(L, -1)) {
    luaL_error(L, "invalid replacement value (a %s)", luaL_typename(L, -1));
  }
  luaL_addvalue(b);
}

int l_gsub(lua_State* L) {
  std::size_t length = 0;
  const char* subject = luaL_checklstring(L, 1, &length);
  const char* pattern = luaL_checkstring(L, 2);
  const int type = lua_type(L, 3);
  // LuaJIT's luaL_optint: the integer cut to int (so 2^32 + 1 means 1).
  const auto most = static_cast<std::int32_t>(luaL_optinteger(L, 4, static_cast<lua_Integer>(length) + 1));
  luaL_argcheck(L, type == LUA_TNUMBER || type == LUA_TSTRING || type == LUA_TFUNCTION || type == LUA_TTABLE, 3,
                "string/function/table expected");
  const bool anchored = *pattern == '^';
  if (anchored) ++pattern;
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  Payer payer = payer_for(L);
  Matcher m(subject, length, StepMeter{&charge_payer, &payer});
  const char* s = subject;
  std::int32_t count = 0;
  while (count < most) {
    const char* e = m.match(s, pattern);
    if (m.failed()) raise_error(L, m, payer);
    if (e != nullptr) {
      ++count;
      add_replacement(L, &b, m, s, e);
      if (m.failed()) raise_error(L, m, payer);
    }
    if (e != nullptr && e > s)
      s = e;
    else if (s < m.subject_end())
      luaL_addchar(&b, *s++);
    else
      break;
    if (anchored) break;
  }
  luaL_addlstring(&b, s, static_cast<std::size_t>(m.subject_end() - s));
  settle_or_raise(L, m, payer);
  luaL_pushresult(&b);
  lua_pushinteger(L, count);
  return 2;
}

}  // namespace

int open_guarded_patterns(lua_State* L) {
  luaL_checktype(L, 1, LUA_TLIGHTUSERDATA);
  lua_getglobal(L, LUA_STRLIBNAME);
  luaL_checktype(L, -1, LUA_TTABLE);
  const luaL_Reg functions[] = {{"find", l_find}, {"match", l_match}, {"gmatch", l_gmatch}, {"gsub", l_gsub}};
  for (const luaL_Reg& f : functions) {
    lua_pushvalue(L, 1);
    lua_pushcclosure(L, f.func, 1);
    lua_setfield(L, -2, f.name);
  }
  return 0;
}

}  // namespace qload::scripts::lua_pattern

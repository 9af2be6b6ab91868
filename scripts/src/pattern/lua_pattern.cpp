#include "lua_pattern.hpp"

#include <algorithm>
#include <cstring>
#include <type_traits>

namespace qload::scripts::lua_pattern {

static_assert(std::is_trivially_destructible_v<Matcher>, "Lua errors unwind through Matchers without destructors");

namespace {

// The character classes by LuaJIT's lj_char table: ASCII only, bytes >= 128 are in none of
// them, whatever the locale.
constexpr bool is_upper(unsigned char c) {
  return c >= 'A' && c <= 'Z';
}
constexpr bool is_lower(unsigned char c) {
  return c >= 'a' && c <= 'z';
}
constexpr bool is_alpha(unsigned char c) {
  return is_upper(c) || is_lower(c);
}
constexpr bool is_digit(unsigned char c) {
  return c >= '0' && c <= '9';
}
constexpr bool is_alnum(unsigned char c) {
  return is_alpha(c) || is_digit(c);
}
constexpr bool is_graph(unsigned char c) {
  return c > ' ' && c < 127;
}
constexpr bool is_punct(unsigned char c) {
  return is_graph(c) && !is_alnum(c);
}
constexpr bool is_space(unsigned char c) {
  return c == ' ' || (c >= '\t' && c <= '\r');
}
constexpr bool is_cntrl(unsigned char c) {
  return c < ' ' || c == 127;
}
constexpr bool is_xdigit(unsigned char c) {
  return is_digit(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f');
}

// Whether `c` is in the class that `%cls` names; a non-class letter or a non-letter stands
// for itself ("%." is a dot). Upper-case classes are complements. LuaJIT also knows %g.
bool class_match(unsigned char c, unsigned char cls) {
  bool in = false;
  switch (cls | 0x20) {
    case 'a': in = is_alpha(c); break;
    case 'c': in = is_cntrl(c); break;
    case 'd': in = is_digit(c); break;
    case 'g': in = is_graph(c); break;
    case 'l': in = is_lower(c); break;
    case 'p': in = is_punct(c); break;
    case 's': in = is_space(c); break;
    case 'u': in = is_upper(c); break;
    case 'w': in = is_alnum(c); break;
    case 'x': in = is_xdigit(c); break;
    case 'z': in = c == 0; break;
    default: return cls == c;
  }
  return is_lower(cls) ? in : !in;
}

unsigned char byte(const char* p) {
  return static_cast<unsigned char>(*p);
}

}  // namespace

const char* describe(PatternError error) noexcept {
  switch (error) {
    case PatternError::kNone: return "";
    case PatternError::kEndsWithPercent: return "malformed pattern (ends with '%')";
    case PatternError::kMissingBracket: return "malformed pattern (missing ']')";
    case PatternError::kFrontierNeedsSet: return "missing '[' after '%f' in pattern";
    case PatternError::kUnbalancedPattern: return "unbalanced pattern";
    case PatternError::kInvalidCaptureIndex: return "invalid capture index";
    case PatternError::kInvalidPatternCapture: return "invalid pattern capture";
    case PatternError::kTooManyCaptures: return "too many captures";
    case PatternError::kTooComplex: return "pattern too complex";
    case PatternError::kOutOfSteps: return "";
  }
  return "";
}

const char* Matcher::fail(PatternError error) noexcept {
  if (error_ == PatternError::kNone) error_ = error;
  return nullptr;
}

bool Matcher::spend_slow(std::uint64_t steps) noexcept {
  const std::uint64_t used = (kChargeEvery - left_) + steps;
  left_ = kChargeEvery;
  if (failed()) return false;
  if (meter_.charge != nullptr && !meter_.charge(meter_.context, used)) {
    fail(PatternError::kOutOfSteps);
    return false;
  }
  return true;
}

bool Matcher::settle() noexcept {
  const std::uint64_t used = kChargeEvery - left_;
  left_ = kChargeEvery;
  if (used == 0 || meter_.charge == nullptr || meter_.charge(meter_.context, used)) return !failed();
  fail(PatternError::kOutOfSteps);
  return false;
}

const char* Matcher::match(const char* at, const char* pattern) noexcept {
  level_ = 0;
  depth_ = 0;
  return match_here(at, pattern);
}

const char* Matcher::find_plain(const char* from, const char* needle, std::size_t needle_length) noexcept {
  if (needle_length == 0) return from;
  if (needle_length > static_cast<std::size_t>(end_ - from)) return nullptr;
  const char* const last = end_ - needle_length;  // the last place the needle can start
  // memchr in bounded windows, so that a long subject is paid for as it is scanned.
  constexpr std::size_t kWindow = 1 << 16;
  const std::uint64_t compare_steps = 1 + needle_length / 32;
  for (const char* at = from; at <= last;) {
    const std::size_t window = std::min<std::size_t>(static_cast<std::size_t>(last - at) + 1, kWindow);
    const void* hit = std::memchr(at, needle[0], window);
    if (hit == nullptr) {
      if (!spend(1 + window / 64)) return nullptr;
      at += window;
      continue;
    }
    const char* candidate = static_cast<const char*>(hit);
    if (!spend(static_cast<std::size_t>(candidate - at) / 64 + compare_steps)) return nullptr;
    if (std::memcmp(candidate + 1, needle + 1, needle_length - 1) == 0) return candidate;
    at = candidate + 1;
  }
  return nullptr;
}

// One level of the backtracking: every alternative tried below this point goes through
// here, so the depth bound here bounds the C stack.
const char* Matcher::match_here(const char* s, const char* p) noexcept {
  if (++depth_ > kMaxDepth) return fail(PatternError::kTooComplex);
  const char* result = match_items(s, p);
  --depth_;
  return result;
}

// Matches the items of `p` in turn; an item with a single way to match continues in this
// loop, one with alternatives recurses through match_here for each.
const char* Matcher::match_items(const char* s, const char* p) noexcept {
  for (;;) {
    if (!spend(1)) return nullptr;
    switch (*p) {
      case '\0': return s;
      case '(':
        if (p[1] == ')') return open_capture(s, p + 2, kCapturePosition);
        return open_capture(s, p + 1, kCaptureUnfinished);
      case ')': return close_capture(s, p + 1);
      case '$':
        if (p[1] == '\0') return s == end_ ? s : nullptr;
        break;  // elsewhere '$' is an ordinary character
      case '%':
        if (p[1] == 'b') {
          s = balanced(s, p + 2);
          if (s == nullptr) return nullptr;
          p += 4;
          continue;
        }
        if (p[1] == 'f') {
          p += 2;
          if (*p != '[') return fail(PatternError::kFrontierNeedsSet);
          const char* ep = item_end(p);
          if (ep == nullptr) return nullptr;
          const unsigned char before = s == begin_ ? 0 : byte(s - 1);
          const unsigned char here = s < end_ ? byte(s) : 0;  // the end reads as the '\0' after it
          if (set_match(before, p, ep - 1) || !set_match(here, p, ep - 1) || failed()) return nullptr;
          p = ep;
          continue;
        }
        if (is_digit(byte(p + 1))) {
          s = back_reference(s, p[1]);
          if (s == nullptr) return nullptr;
          p += 2;
          continue;
        }
        break;
      default: break;
    }
    const char* ep = item_end(p);
    if (ep == nullptr) return nullptr;
    const bool one = s < end_ && single_match(byte(s), p, ep);
    if (failed()) return nullptr;
    switch (*ep) {
      case '?':
        if (one) {
          const char* result = match_here(s + 1, ep + 1);
          if (result != nullptr || failed()) return result;
        }
        p = ep + 1;
        continue;
      case '*': return greedy(s, p, ep);
      case '+': return one ? greedy(s + 1, p, ep) : nullptr;
      case '-': return lazy(s, p, ep);
      default:
        if (!one) return nullptr;
        ++s;
        p = ep;
        continue;
    }
  }
}

// The end of the single-character item at `p` (a character, '.', "%x" or a set), or nullptr
// with the error set. A set's first character is never its closing ']' ("[]]" is a set).
const char* Matcher::item_end(const char* p) noexcept {
  const char first = *p++;
  if (first == '%') {
    if (*p == '\0') return fail(PatternError::kEndsWithPercent);
    return p + 1;
  }
  if (first != '[') return p;
  if (*p == '^') ++p;
  do {
    if (!spend(1)) return nullptr;
    if (*p == '\0') return fail(PatternError::kMissingBracket);
    if (*p++ == '%' && *p != '\0') ++p;  // an escaped character, "%]" included
  } while (*p != ']');
  return p + 1;
}

bool Matcher::single_match(unsigned char c, const char* p, const char* ep) noexcept {
  switch (*p) {
    case '.': return true;
    case '%': return class_match(c, byte(p + 1));
    case '[': return set_match(c, p, ep - 1);
    default: return byte(p) == c;
  }
}

// `set` points at '[', `set_close` at its ']'. Each element costs a step: a long set must
// not make one step arbitrarily expensive.
bool Matcher::set_match(unsigned char c, const char* set, const char* set_close) noexcept {
  const char* p = set + 1;
  bool negated = false;
  if (*p == '^') {
    negated = true;
    ++p;
  }
  for (; p < set_close; ++p) {
    if (!spend(1)) return false;
    if (*p == '%') {
      ++p;
      if (class_match(c, byte(p))) return !negated;
    } else if (p[1] == '-' && p + 2 < set_close) {
      if (byte(p) <= c && c <= byte(p + 2)) return !negated;
      p += 2;
    } else if (byte(p) == c) {
      return !negated;
    }
  }
  return negated;
}

// Item `p` repeated as often as it matches from `s`, then fewer until the rest matches.
const char* Matcher::greedy(const char* s, const char* p, const char* ep) noexcept {
  std::size_t count = 0;
  while (s + count < end_ && single_match(byte(s + count), p, ep)) {
    if (!spend(1)) return nullptr;
    ++count;
  }
  if (failed()) return nullptr;
  for (;;) {
    const char* result = match_here(s + count, ep + 1);
    if (result != nullptr || failed() || count == 0) return result;
    --count;
  }
}

// Item `p` repeated as rarely as possible: the rest is tried first, then one more.
const char* Matcher::lazy(const char* s, const char* p, const char* ep) noexcept {
  for (;;) {
    const char* result = match_here(s, ep + 1);
    if (result != nullptr || failed()) return result;
    if (s >= end_ || !single_match(byte(s), p, ep) || failed()) return nullptr;
    ++s;
  }
}

const char* Matcher::open_capture(const char* s, const char* p, std::ptrdiff_t what) noexcept {
  if (level_ >= kMaxCaptures) return fail(PatternError::kTooManyCaptures);
  captures_[level_] = Capture{s, what};
  ++level_;
  const char* result = match_here(s, p);
  if (result == nullptr) --level_;  // undone for the next alternative
  return result;
}

const char* Matcher::close_capture(const char* s, const char* p) noexcept {
  int open = level_ - 1;
  while (open >= 0 && captures_[open].length != kCaptureUnfinished) --open;
  if (open < 0) return fail(PatternError::kInvalidPatternCapture);
  captures_[open].length = s - captures_[open].start;
  const char* result = match_here(s, p);
  if (result == nullptr) captures_[open].length = kCaptureUnfinished;
  return result;
}

// "%bxy" at `p` (pointing at x): from an x at `s` to its balancing y.
const char* Matcher::balanced(const char* s, const char* p) noexcept {
  if (p[0] == '\0' || p[1] == '\0') return fail(PatternError::kUnbalancedPattern);
  if (s >= end_ || *s != p[0]) return nullptr;
  const char open = p[0];
  const char close = p[1];
  std::size_t depth = 1;
  while (++s < end_) {
    if (!spend(1)) return nullptr;
    if (*s == close) {
      if (--depth == 0) return s + 1;
    } else if (*s == open) {
      ++depth;
    }
  }
  return nullptr;
}

// "%1".."%9": the text of that (closed) capture again. A position capture has no text and,
// as in LuaJIT, never matches; "%0" is an invalid index.
const char* Matcher::back_reference(const char* s, char digit) noexcept {
  const int index = digit - '1';
  if (index < 0 || index >= level_ || captures_[index].length == kCaptureUnfinished)
    return fail(PatternError::kInvalidCaptureIndex);
  const std::ptrdiff_t length = captures_[index].length;
  if (length < 0 || length > end_ - s) return nullptr;
  const auto size = static_cast<std::size_t>(length);
  if (!spend(1 + size / 32)) return nullptr;
  return std::memcmp(captures_[index].start, s, size) == 0 ? s + size : nullptr;
}

}  // namespace qload::scripts::lua_pattern

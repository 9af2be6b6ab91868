// Lua 5.1 pattern matching with a step budget (lua_pattern.cpp), and the string functions
// built on it (lua_pattern_lib.cpp).
//
// LuaJIT's string.find/match/gmatch/gsub are C code: the sandbox's instruction hook cannot
// fire inside them, so a pathological pattern (string.rep("a*", 30) .. "b" against a long
// run of "a") ran for as long as it liked (issue 18). This matcher has the same semantics
// as LuaJIT 2.1's (the cross-check in tests/scripts/lua_pattern_test.cpp holds it to that)
// but charges every elementary step to a meter, which can stop it, and bounds its recursion
// the way LuaJIT does ("pattern too complex" past 200 levels), so no pattern can overflow
// the C stack.
//
// A Matcher allocates nothing and is trivially destructible: the Lua functions keep one on
// the C stack while Lua errors unwind through them.
#pragma once

#include <cstddef>
#include <cstdint>

struct lua_State;

namespace qload::scripts::lua_pattern {

inline constexpr int kMaxCaptures = 32;  // LUA_MAXCAPTURES
inline constexpr int kMaxDepth = 200;    // LuaJIT's LJ_MAX_XLEVEL for match()
// Steps a matcher spends between two charges to its meter (so between two deadline checks).
inline constexpr std::uint64_t kChargeEvery = 10000;

enum class PatternError : std::uint8_t {
  kNone,
  kEndsWithPercent,        // "...%"
  kMissingBracket,         // "[abc"
  kFrontierNeedsSet,       // "%fx"
  kUnbalancedPattern,      // "%b" without its two characters
  kInvalidCaptureIndex,    // "%3" with fewer captures, "%1" inside capture 1
  kInvalidPatternCapture,  // ")" with no open capture
  kTooManyCaptures,        // more than kMaxCaptures
  kTooComplex,             // recursion deeper than kMaxDepth
  kOutOfSteps,             // the meter refused further steps (its owner knows why)
};

// Lua 5.1's / LuaJIT's message for the error ("" for kNone and kOutOfSteps).
const char* describe(PatternError error) noexcept;

// Pays for matching steps. charge(context, steps) returns false to stop the match.
struct StepMeter {
  bool (*charge)(void* context, std::uint64_t steps) = nullptr;
  void* context = nullptr;
};

// A capture: its start and length, or one of the two markers below as length.
struct Capture {
  const char* start = nullptr;
  std::ptrdiff_t length = 0;
};
inline constexpr std::ptrdiff_t kCaptureUnfinished = -1;
inline constexpr std::ptrdiff_t kCapturePosition = -2;

// Matches patterns against one subject. Not thread-safe; cheap to make.
class Matcher {
 public:
  Matcher(const char* subject, std::size_t length, StepMeter meter) noexcept
      : begin_(subject), end_(subject + length), meter_(meter) {}

  // Matches `pattern` (NUL-terminated: like LuaJIT it ends at its first NUL; no leading '^'
  // handling, callers strip the anchor) at exactly `at`. Returns the end of the match, or
  // nullptr when it does not match or failed() (then error() says why). Resets the captures.
  const char* match(const char* at, const char* pattern) noexcept;

  // Finds `needle` (any bytes) in [from, end of subject); nullptr when absent or failed().
  const char* find_plain(const char* from, const char* needle, std::size_t needle_length) noexcept;

  // Spends `steps` (work done for the match outside the matcher, such as building a gsub
  // result); false once the meter refused.
  bool spend(std::uint64_t steps) noexcept {
    if (steps < left_) {
      left_ -= steps;
      return true;
    }
    return spend_slow(steps);
  }
  // Charges the steps spent since the last charge; false when the meter refuses.
  bool settle() noexcept;

  bool failed() const noexcept { return error_ != PatternError::kNone; }
  PatternError error() const noexcept { return error_; }
  int capture_count() const noexcept { return level_; }
  const Capture& capture(int index) const noexcept { return captures_[index]; }
  const char* subject() const noexcept { return begin_; }
  const char* subject_end() const noexcept { return end_; }

 private:
  const char* match_here(const char* s, const char* p) noexcept;
  const char* match_items(const char* s, const char* p) noexcept;
  const char* item_end(const char* p) noexcept;
  bool single_match(unsigned char c, const char* p, const char* item_end) noexcept;
  bool set_match(unsigned char c, const char* set, const char* set_close) noexcept;
  const char* greedy(const char* s, const char* p, const char* ep) noexcept;
  const char* lazy(const char* s, const char* p, const char* ep) noexcept;
  const char* open_capture(const char* s, const char* p, std::ptrdiff_t what) noexcept;
  const char* close_capture(const char* s, const char* p) noexcept;
  const char* balanced(const char* s, const char* p) noexcept;
  const char* back_reference(const char* s, char digit) noexcept;
  bool spend_slow(std::uint64_t steps) noexcept;
  const char* fail(PatternError error) noexcept;

  const char* begin_;
  const char* end_;
  StepMeter meter_;
  std::uint64_t left_ = kChargeEvery;  // steps until the next charge
  PatternError error_ = PatternError::kNone;
  int level_ = 0;  // captures opened (finished or not)
  int depth_ = 0;  // match_here frames on the C stack
  Capture captures_[kMaxCaptures];
};

// How the sandbox pays for the string functions' steps: charges `steps` against the recipe's
// budget; on refusal writes why ("recipe exceeded its ...") into `message` and returns false.
using ChargeSteps = bool (*)(lua_State* L, std::uint64_t steps, char* message, std::size_t size);
struct Charger {
  ChargeSteps charge;
};

// A lua_CFunction: replaces string.find, string.match, string.gmatch and string.gsub (the
// `string` table is also the strings' __index, so the method forms follow) with versions on
// this matcher that charge through the Charger passed as light userdata in argument 1, which
// must outlive the state. Call it through lua_pcall (it allocates).
int open_guarded_patterns(lua_State* L);

}  // namespace qload::scripts::lua_pattern

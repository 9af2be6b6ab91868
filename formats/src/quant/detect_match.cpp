// Module-name patterns of quantization configs. Each producer matches differently (detect.hpp
// ModulePattern::Kind); regular expressions follow Python's re.match (anchored at the start
// only) through RE2, whose syntax covers the patterns producers write (".*", "$", "\d",
// character classes, alternation, counted repeats) and refuses back-references and lookaround.
// RE2 because the patterns come with untrusted checkpoints: it matches in linear time without
// recursion, bounds its memory, and caps repeat counts, where std::regex recursed per character,
// built a{N} as N copies and overflowed a signed integer parsing a long count (found by
// fuzz_model_config under UBSan).
#include <algorithm>
#include <cctype>
#include <limits>

#include <fmt/format.h>
#include <re2/re2.h>

#include "detect.hpp"
#include "located_error.hpp"

namespace qload::formats::detail {
namespace {

bool is_class_name(std::string_view text) {
  return !text.empty() && std::isupper(static_cast<unsigned char>(text.front())) != 0 &&
         text.find('.') == std::string_view::npos;
}

bool has_glob(std::string_view text) {
  return text.find_first_of("*?") != std::string_view::npos;
}

// fnmatch without brackets, iteratively: '*' any run (dots included), '?' one byte. O(n * m)
// at worst, where glibc's recursive fnmatch is exponential in the number of stars.
bool glob_matches(std::string_view pattern, std::string_view text) {
  std::size_t p = 0;
  std::size_t t = 0;
  std::size_t star = std::string_view::npos;
  std::size_t resume = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

Result<bool> regex_matches(const ModulePattern& pattern, std::string_view module) {
  if (module.size() > kMaxRegexSubjectBytes)
    return fail(Error(Errc::kUnsupported, fmt::format("module name of {} bytes is too long to match against {}",
                                                      module.size(), quote_name(pattern.text)))
                    .with_tensor(std::string(module.substr(0, 200))));
  return pattern.regex->Match(re2::StringPiece(module.data(), module.size()), 0, module.size(), re2::RE2::ANCHOR_START,
                              nullptr, 0);
}

}  // namespace

Result<ModulePattern> make_pattern(ModulePattern::Kind kind, std::string text, const std::string& path,
                                   std::string_view key, PatternTally& tally) {
  if (text.size() > kMaxPatternBytes || text.find('\0') != std::string::npos)
    return fail(located(Errc::kUnsupported,
                        fmt::format("{} entry {} is longer than {} bytes or has a NUL byte", key,
                                    quote_name(text.substr(0, 200)), kMaxPatternBytes),
                        path));
  if (++tally.patterns > kMaxPatterns)
    return fail(located(Errc::kUnsupported,
                        fmt::format("{}: the config lists more than {} module patterns in all (qload's limit, for "
                                    "every list of the config together)",
                                    key, kMaxPatterns),
                        path));
  ModulePattern pattern{.kind = kind, .text = std::move(text), .regex = nullptr};
  const bool ct_regex = kind == ModulePattern::Kind::kCtTarget && pattern.text.starts_with("re:");
  if (kind == ModulePattern::Kind::kRegex || ct_regex) {
    // Counted before compiling: the cap bounds the memory the config's expressions hold.
    if (++tally.regexes > kMaxRegexPatterns)
      return fail(located(Errc::kUnsupported,
                          fmt::format("{}: the config has more than {} regular expressions in all (qload's limit)", key,
                                      kMaxRegexPatterns),
                          path));
    const std::string_view expr = std::string_view(pattern.text).substr(ct_regex ? 3 : 0);
    re2::RE2::Options options;
    options.set_log_errors(false);      // the error goes into the message below, not to stderr
    options.set_max_mem(kRegexMaxMem);  // a program that does not fit is refused below
    auto regex = std::make_shared<const re2::RE2>(re2::StringPiece(expr.data(), expr.size()), options);
    if (!regex->ok())
      return fail(located(Errc::kUnsupported,
                          fmt::format("{} entry {} is not a regular expression qload can use: {}", key,
                                      quote_name(pattern.text), regex->error()),
                          path));
    pattern.regex = std::move(regex);
  }
  return pattern;
}

std::uint64_t match_cost(const ModulePattern& pattern, std::string_view module) {
  // Saturating: a name longer than any real one only exhausts the budget sooner.
  const auto times = [](std::uint64_t a, std::uint64_t b) {
    return b != 0 && a > std::numeric_limits<std::uint64_t>::max() / b ? std::numeric_limits<std::uint64_t>::max()
                                                                       : a * b;
  };
  const std::uint64_t bytes = std::uint64_t{module.size()} + 1;
  if (pattern.regex) return times(bytes, static_cast<std::uint64_t>(pattern.regex->ProgramSize()) + 1);
  if (pattern.kind == ModulePattern::Kind::kSubstringOrGlob) return times(bytes, pattern.text.size() + 1);
  return 1 + std::min(pattern.text.size(), module.size()) / 16;
}

Result<MatchRank> match_module(const ModulePattern& pattern, std::string_view module) {
  switch (pattern.kind) {
    case ModulePattern::Kind::kSubstringOrGlob: {
      if (!has_glob(pattern.text))
        return module.find(pattern.text) != std::string_view::npos ? MatchRank::kExact : MatchRank::kNone;
      return glob_matches(pattern.text, module) ? MatchRank::kRegex : MatchRank::kNone;
    }
    case ModulePattern::Kind::kRegex: {
      QLOAD_ASSIGN_OR_RETURN(const bool hit, regex_matches(pattern, module));
      return hit ? MatchRank::kRegex : MatchRank::kNone;
    }
    case ModulePattern::Kind::kCtTarget: {
      if (pattern.regex) {
        QLOAD_ASSIGN_OR_RETURN(const bool hit, regex_matches(pattern, module));
        return hit ? MatchRank::kRegex : MatchRank::kNone;
      }
      if (pattern.text == module) return MatchRank::kExact;
      return is_class_name(pattern.text) ? MatchRank::kClass : MatchRank::kNone;
    }
  }
  return MatchRank::kNone;
}

}  // namespace qload::formats::detail

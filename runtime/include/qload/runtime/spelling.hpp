// Near misses in names people type (recipe keys, settings, environment variables), for
// "did you mean ...?" in error messages and warnings.
#pragma once

#include <cstddef>
#include <string_view>

namespace qload {

// Levenshtein distance: insertions, deletions and substitutions of single bytes.
std::size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace qload

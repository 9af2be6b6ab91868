// An input iterator for nlohmann's SAX parser that records how many bytes the lexer has
// consumed. nlohmann reports positions only for syntax errors; with this, a SAX handler can
// also say where a duplicate key or a wrongly typed value is (to within the lexer's one byte
// of look-ahead: the offset reported is just past the offending token).
#pragma once

#include <cstddef>
#include <iterator>

namespace qload::formats {

class JsonCursor {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  JsonCursor(const char* at, const char* base, std::size_t* consumed) noexcept
      : at_(at), base_(base), consumed_(consumed) {}

  reference operator*() const noexcept { return *at_; }
  JsonCursor& operator++() noexcept {
    ++at_;
    *consumed_ = static_cast<std::size_t>(at_ - base_);
    return *this;
  }
  JsonCursor operator++(int) noexcept {
    JsonCursor before = *this;
    ++*this;
    return before;
  }
  friend bool operator==(const JsonCursor& a, const JsonCursor& b) noexcept { return a.at_ == b.at_; }

 private:
  const char* at_;
  const char* base_;
  std::size_t* consumed_;
};

}  // namespace qload::formats

#include "qload/formats/strict_json.hpp"

#include <new>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "file_io.hpp"
#include "json_cursor.hpp"
#include "located_error.hpp"
#include "qload/runtime/utf8.hpp"

namespace qload::formats {
namespace {

using Json = nlohmann::json;

// nlohmann's SAX DOM builder, plus duplicate-key and depth checks.
class StrictDomBuilder {
 public:
  StrictDomBuilder(const std::string& path, const std::size_t* consumed, std::size_t max_depth)
      : path_(path), consumed_(consumed), max_depth_(max_depth) {}

  bool null() { return add(nullptr); }
  bool boolean(bool value) { return add(value); }
  bool number_integer(std::int64_t value) { return add(value); }
  bool number_unsigned(std::uint64_t value) { return add(value); }
  bool number_float(double value, const std::string&) { return add(value); }
  bool string(std::string& value) { return add(std::move(value)); }
  bool binary(Json::binary_t&) { return reject("binary value"); }
  bool start_object(std::size_t) { return open(Json::object()); }
  bool start_array(std::size_t) { return open(Json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(std::string& name) {
    if (stack_.back()->contains(name)) return reject(fmt::format("duplicate key {}", quote_name(name)));
    key_ = std::move(name);
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& ex) {
    std::string_view what = ex.what();
    if (const auto end = what.find("] "); end != std::string_view::npos) what.remove_prefix(end + 2);
    // nlohmann quotes the token it last read ("; last read: '...'"): the file's own bytes,
    // which an error must never echo (a lockfile path may name any readable file).
    if (const auto last = what.find("; last read:"); last != std::string_view::npos) what = what.substr(0, last);
    error_ = located(Errc::kCorrupt, fmt::format("invalid JSON: {}", what), path_, {}, position);
    return false;
  }

  Json take_root() { return std::move(root_); }
  std::optional<Error>& error() { return error_; }

 private:
  bool add(Json value) {
    if (stack_.empty()) return reject("top level is not an object");
    Json* parent = stack_.back();
    if (parent->is_array()) {
      parent->push_back(std::move(value));
    } else {
      parent->emplace(std::move(key_), std::move(value));
    }
    return true;
  }
  bool open(Json value) {
    if (stack_.size() >= max_depth_) return reject(fmt::format("nested deeper than {} levels", max_depth_));
    if (stack_.empty()) {
      if (!value.is_object()) return reject("top level is not an object");
      root_ = std::move(value);
      stack_.push_back(&root_);
      return true;
    }
    // Only the innermost open container ever grows, so pointers to open ones stay valid.
    Json* parent = stack_.back();
    Json* child = nullptr;
    if (parent->is_array()) {
      parent->push_back(std::move(value));
      child = &parent->back();
    } else {
      child = &parent->emplace(std::move(key_), std::move(value)).first.value();
    }
    stack_.push_back(child);
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }
  bool reject(std::string message) {
    error_ = located(Errc::kCorrupt, std::move(message), path_, {}, *consumed_);
    return false;
  }

  const std::string& path_;
  const std::size_t* consumed_;
  std::size_t max_depth_;
  Json root_;
  std::vector<Json*> stack_;
  std::string key_;
  std::optional<Error> error_;
};

}  // namespace

std::size_t skip_json_whitespace(std::string_view text) noexcept {
  std::size_t i = 0;
  while (i < text.size() && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r')) ++i;
  return i;
}

Result<Json> parse_strict_json_object(std::string_view text, const std::string& path, std::size_t max_depth) {
  if (const auto bad = first_invalid_utf8(text))
    return fail(located(Errc::kCorrupt, "not valid UTF-8", path, {}, *bad));
  // nlohmann's lexer ends the input at a NUL byte, ignoring whatever follows.
  if (const auto nul = text.find('\0'); nul != std::string_view::npos)
    return fail(located(Errc::kCorrupt, "contains a NUL byte", path, {}, nul));
  // Checked here because nlohmann's lexer would silently skip a byte-order mark.
  if (const std::size_t first = skip_json_whitespace(text); first == text.size() || text[first] != '{')
    return fail(located(Errc::kCorrupt, "not a JSON object (does not start with '{')", path, {}, first));
  std::size_t consumed = 0;
  StrictDomBuilder builder(path, &consumed, max_depth);
  try {
    const JsonCursor begin(text.data(), text.data(), &consumed);
    const JsonCursor end(text.data() + text.size(), text.data(), &consumed);
    if (!Json::sax_parse(begin, end, &builder)) {
      if (builder.error()) return fail(std::move(*builder.error()));
      return fail(located(Errc::kInternal, "JSON parser stopped without an error", path));
    }
  } catch (const std::bad_alloc&) {
    return fail(located(Errc::kOutOfMemory, "out of memory while parsing JSON", path));
  } catch (const std::exception& ex) {  // nlohmann must not throw through here; report, never crash
    return fail(located(Errc::kInternal, fmt::format("JSON parser threw: {}", ex.what()), path));
  }
  return builder.take_root();
}

Result<nlohmann::json> read_strict_json_file(const std::string& path, std::uint64_t max_bytes, std::size_t max_depth) {
  QLOAD_ASSIGN_OR_RETURN(const std::vector<std::byte> bytes, read_small_file(path, max_bytes));
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return parse_strict_json_object(text, path, max_depth);
}

}  // namespace qload::formats

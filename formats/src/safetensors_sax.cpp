#include "safetensors_sax.hpp"

#include <algorithm>
#include <numeric>
#include <optional>
#include <tuple>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "json_cursor.hpp"
#include "located_error.hpp"

namespace qload::formats {
namespace {

constexpr std::string_view kMetadataKey = "__metadata__";

enum class State : std::uint8_t {
  kStart,
  kRoot,
  kRootValue,
  kMetadata,
  kMetadataValue,
  kEntry,
  kEntryValue,
  kDims,
  kOffsets,
  kDone
};
enum Field : std::uint8_t { kDtype = 1, kShape = 2, kDataOffsets = 4 };

// The SAX handler: a small state machine over the only header shape the format allows.
class HeaderHandler {
 public:
  HeaderHandler(const RawHeaderContext& context, const std::size_t* consumed) : ctx_(context), consumed_(consumed) {}

  bool null() {
    if (state_ != State::kRootValue || !in_metadata_) return unexpected("null");
    state_ = State::kRoot;  // "__metadata__": null means none, as in the reference (an Option)
    return true;
  }
  bool boolean(bool) { return unexpected("a boolean"); }
  bool binary(nlohmann::json::binary_t&) { return unexpected("binary data"); }
  bool number_unsigned(std::uint64_t value) { return number(value); }
  // nlohmann reports only numbers written with a minus sign here; "-0" is one of them and, as
  // in the reference (which reads it as the float -0.0), not an unsigned integer.
  bool number_integer(std::int64_t value) {
    return unexpected(value < 0 ? fmt::format("the negative number {}", value) : std::string("-0"));
  }
  bool number_float(double, const std::string& text) {
    const bool integral = text.find_first_of(".eE") == std::string::npos;
    if (integral && text[0] != '-' && (state_ == State::kDims || state_ == State::kOffsets))
      return fail_here(Errc::kOverflow, fmt::format("{} (found {}, which does not fit in 64 bits)", expected(), text));
    return unexpected(fmt::format("the number {}", text));
  }
  bool string(std::string& value);
  bool start_object(std::size_t);
  bool key(std::string& name);
  bool end_object();
  bool start_array(std::size_t);
  bool end_array();
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& ex) {
    std::string_view what = ex.what();
    if (const auto end = what.find("] "); end != std::string_view::npos) what.remove_prefix(end + 2);
    error_ = located(Errc::kCorrupt, fmt::format("header is not valid JSON: {}", what), ctx_.path, {},
                     ctx_.json_offset + position);
    return false;
  }

  RawHeader& header() { return header_; }
  std::optional<Error>& error() { return error_; }

 private:
  bool number(std::uint64_t value);
  bool in_entry() const {
    return state_ == State::kEntry || state_ == State::kEntryValue || state_ == State::kDims ||
           state_ == State::kOffsets || (state_ == State::kRootValue && !in_metadata_);
  }
  std::string expected() const;
  bool unexpected(std::string_view found) {
    return fail_here(Errc::kCorrupt, fmt::format("{} (found {})", expected(), found));
  }
  bool fail_here(Errc code, std::string message) {
    error_ = located(code, std::move(message), ctx_.path, in_entry() ? std::string_view(entry_.name) : "", here());
    return false;
  }
  std::uint64_t here() const { return ctx_.json_offset + *consumed_; }
  bool finish_entry();
  bool check_unique_names();

  const RawHeaderContext& ctx_;
  const std::size_t* consumed_;
  State state_ = State::kStart;
  bool in_metadata_ = false;
  bool seen_metadata_ = false;
  std::uint8_t fields_ = 0;  // Field bits seen in the current entry
  Field field_ = kDtype;     // the field whose value comes next
  std::size_t offsets_seen_ = 0;
  std::string metadata_key_;
  RawTensor entry_;
  RawHeader header_;
  std::optional<Error> error_;
};

std::string HeaderHandler::expected() const {
  switch (state_) {
    case State::kStart: return "the header must be a JSON object";
    case State::kRootValue:
      return in_metadata_ ? "__metadata__ must be an object of string values"
                          : "a tensor entry must be an object with dtype, shape and data_offsets";
    case State::kMetadataValue:
      return fmt::format("__metadata__ value of key {} must be a string", quote_name(metadata_key_));
    case State::kEntryValue:
      if (field_ == kDtype) return "dtype must be a string";
      if (field_ == kShape) return "shape must be an array of non-negative integers";
      return "data_offsets must be an array of two non-negative integers [BEGIN, END]";
    case State::kDims: return "shape must be an array of non-negative integers";
    case State::kOffsets: return "data_offsets must be an array of two non-negative integers [BEGIN, END]";
    default: return "unexpected JSON value";
  }
}

bool HeaderHandler::number(std::uint64_t value) {
  if (state_ == State::kDims) {
    entry_.dims.push_back(value);
    return true;
  }
  if (state_ != State::kOffsets) return unexpected(fmt::format("the number {}", value));
  if (offsets_seen_ == 2) return unexpected("more than two numbers");
  (offsets_seen_++ == 0 ? entry_.begin : entry_.end) = value;
  return true;
}

bool HeaderHandler::string(std::string& value) {
  if (state_ == State::kMetadataValue) {
    header_.metadata.emplace(std::move(metadata_key_), std::move(value));
    state_ = State::kMetadata;
    return true;
  }
  if (state_ == State::kEntryValue && field_ == kDtype) {
    const auto dtype = parse_dtype(value);
    if (!dtype)
      return fail_here(Errc::kUnsupported,
                       fmt::format("unknown dtype {} (safetensors spellings are exact and upper-case, e.g. F32, "
                                   "BF16, F8_E4M3)",
                                   quote_name(value)));
    entry_.dtype = *dtype;
    state_ = State::kEntry;
    return true;
  }
  return unexpected(fmt::format("the string {}", quote_name(value)));
}

bool HeaderHandler::start_object(std::size_t) {
  if (state_ == State::kStart) {
    state_ = State::kRoot;
    return true;
  }
  if (state_ != State::kRootValue) return unexpected("an object");
  if (in_metadata_) {
    state_ = State::kMetadata;
    return true;
  }
  if (header_.tensors.size() >= ctx_.max_tensors)
    return fail_here(Errc::kUnsupported,
                     fmt::format("the header has more than {} tensor entries (qload's limit)", ctx_.max_tensors));
  fields_ = 0;
  state_ = State::kEntry;
  return true;
}

bool HeaderHandler::key(std::string& name) {
  if (state_ == State::kRoot) {
    in_metadata_ = name == kMetadataKey;
    if (in_metadata_) {
      if (seen_metadata_) return fail_here(Errc::kCorrupt, "__metadata__ appears twice in the header");
      seen_metadata_ = true;
    } else {
      entry_ = RawTensor{.name = std::move(name), .name_offset = here()};
    }
    state_ = State::kRootValue;
    return true;
  }
  if (state_ == State::kMetadata) {
    if (header_.metadata.contains(name))
      return fail_here(Errc::kCorrupt, fmt::format("__metadata__ key {} appears twice", quote_name(name)));
    metadata_key_ = std::move(name);
    state_ = State::kMetadataValue;
    return true;
  }
  // Only entries remain (nlohmann emits keys only inside objects).
  if (name == "dtype")
    field_ = kDtype;
  else if (name == "shape")
    field_ = kShape;
  else if (name == "data_offsets")
    field_ = kDataOffsets;
  else
    return fail_here(Errc::kCorrupt, fmt::format("unknown field {} in tensor entry (only dtype, shape and "
                                                 "data_offsets are allowed)",
                                                 quote_name(name)));
  if (fields_ & field_) return fail_here(Errc::kCorrupt, fmt::format("field {} appears twice", name));
  fields_ |= field_;
  state_ = State::kEntryValue;
  return true;
}

bool HeaderHandler::end_object() {
  switch (state_) {
    case State::kMetadata: state_ = State::kRoot; return true;
    case State::kEntry: return finish_entry();
    case State::kRoot: state_ = State::kDone; return check_unique_names();
    default: return unexpected("the end of an object");
  }
}

bool HeaderHandler::start_array(std::size_t) {
  if (state_ != State::kEntryValue || field_ == kDtype) return unexpected("an array");
  state_ = field_ == kShape ? State::kDims : State::kOffsets;
  offsets_seen_ = 0;
  return true;
}

bool HeaderHandler::end_array() {
  if (state_ == State::kOffsets && offsets_seen_ != 2)
    return unexpected(fmt::format("{} number{}", offsets_seen_, offsets_seen_ == 1 ? "" : "s"));
  state_ = State::kEntry;
  return true;
}

bool HeaderHandler::finish_entry() {
  if (fields_ != (kDtype | kShape | kDataOffsets)) {
    std::string missing;
    for (auto [bit, field] : {std::pair{kDtype, "dtype"}, {kShape, "shape"}, {kDataOffsets, "data_offsets"}})
      if (!(fields_ & bit)) missing += missing.empty() ? field : fmt::format(", {}", field);
    return fail_here(Errc::kCorrupt, fmt::format("tensor entry is missing {}", missing));
  }
  header_.tensors.push_back(std::move(entry_));
  entry_ = RawTensor{};
  state_ = State::kRoot;
  return true;
}

// JSON forbids nothing here, so duplicates are found after the parse: sorting indices by
// name is O(n log n) and keeps names stored once.
bool HeaderHandler::check_unique_names() {
  const auto& tensors = header_.tensors;
  std::vector<std::size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::tie(tensors[a].name, tensors[a].name_offset) < std::tie(tensors[b].name, tensors[b].name_offset);
  });
  for (std::size_t i = 1; i < order.size(); ++i) {
    const RawTensor& first = tensors[order[i - 1]];
    const RawTensor& again = tensors[order[i]];
    if (first.name != again.name) continue;
    error_ =
        located(Errc::kCorrupt, fmt::format("duplicate tensor name (first entry ends at offset {})", first.name_offset),
                ctx_.path, again.name, again.name_offset);
    return false;
  }
  return true;
}

}  // namespace

Result<RawHeader> parse_raw_header(std::string_view json, const RawHeaderContext& context) {
  std::size_t consumed = 0;
  HeaderHandler handler(context, &consumed);
  try {
    const JsonCursor begin(json.data(), json.data(), &consumed);
    const JsonCursor end(json.data() + json.size(), json.data(), &consumed);
    if (!nlohmann::json::sax_parse(begin, end, &handler)) {
      if (handler.error()) return fail(std::move(*handler.error()));
      return fail(located(Errc::kInternal, "header parser stopped without an error", context.path));
    }
  } catch (const std::bad_alloc&) {
    return fail(located(Errc::kOutOfMemory, "out of memory while parsing the header", context.path));
  } catch (const std::exception& ex) {  // nlohmann must not throw through here; report, never crash
    return fail(located(Errc::kInternal, fmt::format("header parser threw: {}", ex.what()), context.path));
  }
  return std::move(handler.header());
}

}  // namespace qload::formats

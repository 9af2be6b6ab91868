// safetensors header validation: the length and text checks, the JSON stage
// (safetensors_sax.cpp), then the layout of the data buffer in the reference implementation's
// order (offsets, overflow, sub-byte alignment, size, then the file length) over the entries
// sorted by data_offsets.
#include <algorithm>
#include <numeric>
#include <string_view>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "header_length.hpp"
#include "located_error.hpp"
#include "qload/formats/safetensors.hpp"
#include "qload/formats/strict_json.hpp"
#include "qload/runtime/utf8.hpp"
#include "safetensors_sax.hpp"

namespace qload::formats {
namespace {

struct Layout {
  const std::string& path;
  std::uint64_t data_offset;  // 8 + N
  std::uint64_t file_size;

  // Absolute file offset of a data-buffer offset; saturates (only error messages see that).
  std::uint64_t absolute(std::uint64_t relative) const {
    std::uint64_t out = 0;
    return __builtin_add_overflow(data_offset, relative, &out) ? UINT64_MAX : out;
  }
};

// BEGIN must equal the previous END (0 for the first) and END >= BEGIN: no gaps, no overlaps.
Status check_offsets(const RawTensor& t, const RawTensor* previous, std::uint64_t expected, const Layout& layout) {
  const auto error = [&](std::string message) {
    return fail(located(Errc::kCorrupt, fmt::format("data_offsets [{}, {}]: {}", t.begin, t.end, message), layout.path,
                        t.name, layout.absolute(t.begin)));
  };
  if (t.end < t.begin) return error("END is before BEGIN");
  if (t.begin == expected) return {};
  if (previous == nullptr) return error("the first tensor must start at 0 (a gap before it)");
  if (t.begin > expected)
    return error(fmt::format("gap of {} bytes after tensor {}, which ends at {}", t.begin - expected,
                             quote_name(previous->name), expected));
  return error(fmt::format("overlaps tensor {}, which ends at {}", quote_name(previous->name), expected));
}

// dtype x shape, then END - BEGIN against it.
Result<std::uint64_t> check_size(const RawTensor& t, const Shape& shape, const Layout& layout) {
  auto nbytes = shape.nbytes(t.dtype);
  if (!nbytes) {
    return fail(located(nbytes.error().code(), fmt::format("tensor size: {}", nbytes.error().message()), layout.path,
                        t.name, layout.absolute(t.begin)));
  }
  if (t.end - t.begin != *nbytes)
    return fail(located(Errc::kCorrupt,
                        fmt::format("data_offsets [{}, {}] span {} bytes but {} {} needs {}", t.begin, t.end,
                                    t.end - t.begin, dtype_name(t.dtype), shape.to_string(), *nbytes),
                        layout.path, t.name, layout.absolute(t.begin)));
  return *nbytes;
}

// The data buffer must end exactly at the end of the file: no trailing bytes (polyglot files).
Status check_file_end(std::uint64_t data_end, const RawTensor* last, const Layout& layout) {
  std::uint64_t end = 0;
  if (__builtin_add_overflow(layout.data_offset, data_end, &end))
    return fail(
        located(Errc::kOverflow,
                fmt::format("data end {} + data start {} does not fit in 64 bits", data_end, layout.data_offset),
                layout.path, last ? std::string_view(last->name) : "", layout.data_offset));
  if (end > layout.file_size)
    return fail(located(Errc::kTruncated,
                        fmt::format("file is {} bytes short: tensor data ends at {} but the file has {} bytes",
                                    end - layout.file_size, end, layout.file_size),
                        layout.path, last ? std::string_view(last->name) : "", layout.file_size));
  if (end < layout.file_size)
    return fail(located(Errc::kCorrupt,
                        fmt::format("{} trailing bytes after the tensor data (data ends at {}, the file has {} bytes)",
                                    layout.file_size - end, end, layout.file_size),
                        layout.path, {}, end));
  return {};
}

Result<std::vector<TensorEntry>> check_layout(std::vector<RawTensor>& raw, const Layout& layout) {
  std::vector<std::size_t> order(raw.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    // (BEGIN, END) as the reference sorts, so a zero-size tensor precedes one starting at the
    // same byte; then name, so equal offsets come out in a fixed order.
    return std::tie(raw[a].begin, raw[a].end, raw[a].name) < std::tie(raw[b].begin, raw[b].end, raw[b].name);
  });
  std::vector<TensorEntry> tensors;
  tensors.reserve(raw.size());
  const RawTensor* previous = nullptr;
  std::uint64_t data_end = 0;
  for (const std::size_t i : order) {
    RawTensor& t = raw[i];
    QLOAD_TRY(check_offsets(t, previous, data_end, layout));
    Shape shape(std::move(t.dims));
    QLOAD_ASSIGN_OR_RETURN(const std::uint64_t nbytes, check_size(t, shape, layout));
    tensors.push_back(TensorEntry{.name = t.name,
                                  .file = 0,
                                  .offset = layout.absolute(t.begin),
                                  .nbytes = nbytes,
                                  .dtype = t.dtype,
                                  .shape = std::move(shape)});
    data_end = t.end;
    previous = &t;
  }
  QLOAD_TRY(check_file_end(data_end, previous, layout));
  return tensors;
}

}  // namespace

Status check_length_field(std::uint64_t file_size, const std::string& path) {
  if (file_size >= kLengthFieldBytes) return {};
  return fail(
      located(Errc::kTruncated,
              fmt::format("file is {} bytes, too small for the 8-byte header length of a safetensors file", file_size),
              path, {}, 0));
}

Status check_header_length(std::uint64_t header_bytes, std::uint64_t file_size, const std::string& path,
                           const SafetensorsLimits& limits) {
  if (header_bytes > limits.max_header_bytes)
    return fail(
        located(Errc::kCorrupt,
                fmt::format("header length {} exceeds the limit of {} bytes", header_bytes, limits.max_header_bytes),
                path, {}, 0));
  std::uint64_t end = 0;
  if (__builtin_add_overflow(kLengthFieldBytes, header_bytes, &end))
    return fail(located(Errc::kOverflow, fmt::format("header length {} + 8 does not fit in 64 bits", header_bytes),
                        path, {}, 0));
  if (end > file_size)
    return fail(
        located(Errc::kTruncated,
                fmt::format("header length {} runs past the end of the file ({} bytes)", header_bytes, file_size), path,
                {}, 0));
  return {};
}

Result<SafetensorsHeader> parse_safetensors_header(std::span<const std::byte> header_json, std::uint64_t file_size,
                                                   const std::string& path, const SafetensorsLimits& limits) {
  const std::uint64_t n = header_json.size();
  QLOAD_TRY(check_header_length(n, file_size, path, limits));
  const std::string_view text(reinterpret_cast<const char*>(header_json.data()), header_json.size());
  if (const auto bad = first_invalid_utf8(text))
    return fail(
        located(Errc::kCorrupt,
                fmt::format("header is not valid UTF-8 (byte 0x{:02x})", static_cast<unsigned char>(text[*bad])), path,
                {}, kLengthFieldBytes + *bad));
  // nlohmann's lexer takes a NUL byte for the end of input, so "{}\0<anything>" would pass
  // as "{}". JSON has no place for a raw NUL, so any is an error.
  if (const auto nul = text.find('\0'); nul != std::string_view::npos)
    return fail(located(Errc::kCorrupt, "header contains a NUL byte", path, {}, kLengthFieldBytes + nul));
  // Space padding is allowed at both ends; anything else before the object is not (nlohmann
  // would silently skip a byte-order mark).
  if (const std::size_t first = skip_json_whitespace(text); first == text.size() || text[first] != '{')
    return fail(located(Errc::kCorrupt, "header is not a JSON object (it must start with '{')", path, {},
                        kLengthFieldBytes + first));
  QLOAD_ASSIGN_OR_RETURN(
      RawHeader raw,
      parse_raw_header(text, {.path = path, .json_offset = kLengthFieldBytes, .max_tensors = limits.max_tensors}));
  const Layout layout{.path = path, .data_offset = kLengthFieldBytes + n, .file_size = file_size};
  QLOAD_ASSIGN_OR_RETURN(std::vector<TensorEntry> tensors, check_layout(raw.tensors, layout));
  return SafetensorsHeader{.file_size = file_size,
                           .header_bytes = n,
                           .data_offset = layout.data_offset,
                           .metadata = std::move(raw.metadata),
                           .tensors = std::move(tensors)};
}

Result<SafetensorsHeader> parse_safetensors_bytes(std::span<const std::byte> file_bytes, const std::string& path,
                                                  const SafetensorsLimits& limits) {
  QLOAD_TRY(check_length_field(file_bytes.size(), path));
  const std::uint64_t n = decode_le64(file_bytes.first<8>());
  QLOAD_TRY(check_header_length(n, file_bytes.size(), path, limits));
  return parse_safetensors_header(file_bytes.subspan(kLengthFieldBytes, n), file_bytes.size(), path, limits);
}

}  // namespace qload::formats

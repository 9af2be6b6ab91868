#include "qload/formats/safetensors_writer.hpp"

#include <algorithm>
#include <set>
#include <string_view>

#include <fmt/format.h>

#include "file_io.hpp"
#include "header_length.hpp"
#include "qload/runtime/utf8.hpp"
#include "temp_file.hpp"

namespace qload::formats {
namespace {

constexpr std::uint64_t kMaxHeaderBytes = SafetensorsLimits{}.max_header_bytes;

// JSON string escaping as serde_json (the reference writer) does it, so headers match byte
// for byte: short escapes where JSON has them, \u00xx for other control characters.
void append_json_string(std::string& out, std::string_view text) {
  out += '"';
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        else
          out += c;
    }
  }
  out += '"';
}

Status check_text(std::string_view text, std::string_view what) {
  if (!first_invalid_utf8(text)) return {};
  return fail(Errc::kInvalidArgument, fmt::format("{} is not valid UTF-8", what));
}

Status check_names(std::span<const WriterTensor> tensors) {
  std::set<std::string_view> seen;
  for (const WriterTensor& t : tensors) {
    if (Status ok = check_text(t.name, "tensor name"); !ok) return fail(std::move(ok.error()).with_tensor(t.name));
    if (t.name == "__metadata__")
      return fail(Error(Errc::kInvalidArgument, "__metadata__ is reserved, not a tensor name").with_tensor(t.name));
    if (!seen.insert(t.name).second)
      return fail(Error(Errc::kInvalidArgument, "duplicate tensor name").with_tensor(t.name));
  }
  return {};
}

Result<std::string> metadata_json(const std::map<std::string, std::string>& metadata) {
  std::string out = "\"__metadata__\":{";
  bool first = true;
  for (const auto& [key, value] : metadata) {
    QLOAD_TRY(check_text(key, "metadata key"));
    QLOAD_TRY(check_text(value, fmt::format("metadata value of {}", escape_for_terminal(key))));
    if (!first) out += ',';
    first = false;
    append_json_string(out, key);
    out += ':';
    append_json_string(out, value);
  }
  out += '}';
  return out;
}

// Appends one tensor's entry and returns its byte size.
Result<std::uint64_t> append_entry(std::string& json, const WriterTensor& t, std::uint64_t begin) {
  auto nbytes = t.shape.nbytes(t.dtype);
  if (!nbytes) return fail(std::move(nbytes.error()).with_tensor(t.name));
  if (!t.fill && t.bytes.size() != *nbytes)
    return fail(Error(Errc::kInvalidArgument, fmt::format("{} {} needs {} bytes but {} were given", dtype_name(t.dtype),
                                                          t.shape.to_string(), *nbytes, t.bytes.size()))
                    .with_tensor(t.name));
  auto end = checked_add(begin, *nbytes);
  if (!end) return fail(std::move(end.error()).with_tensor(t.name));
  append_json_string(json, t.name);
  json += fmt::format(R"(:{{"dtype":"{}","shape":[{}],"data_offsets":[{},{}]}})", dtype_name(t.dtype),
                      fmt::join(t.shape.dims(), ","), begin, *end);
  return *nbytes;
}

// Each tensor's size in bytes.
Result<std::vector<std::uint64_t>> header_and_sizes(std::span<const WriterTensor> tensors,
                                                    const std::map<std::string, std::string>& metadata,
                                                    bool empty_metadata_entry, std::vector<std::byte>& header) {
  QLOAD_TRY(check_names(tensors));
  std::string json = "{";
  if (!metadata.empty() || empty_metadata_entry) {
    QLOAD_ASSIGN_OR_RETURN(const std::string entries, metadata_json(metadata));
    json += entries;
  }
  std::vector<std::uint64_t> sizes;
  std::uint64_t offset = 0;
  for (const WriterTensor& t : tensors) {
    if (json.size() > 1) json += ',';
    QLOAD_ASSIGN_OR_RETURN(const std::uint64_t nbytes, append_entry(json, t, offset));
    sizes.push_back(nbytes);
    offset += nbytes;  // append_entry checked the sum
  }
  json += '}';
  json.append((8 - json.size() % 8) % 8, ' ');  // the reference pads so the data starts 8-aligned
  if (json.size() > kMaxHeaderBytes)
    return fail(Errc::kInvalidArgument,
                fmt::format("header would be {} bytes, above the format's limit of {}", json.size(), kMaxHeaderBytes));
  header.resize(kLengthFieldBytes + json.size());
  for (std::size_t i = 0; i < kLengthFieldBytes; ++i) header[i] = static_cast<std::byte>(json.size() >> (8 * i));
  std::copy_n(reinterpret_cast<const std::byte*>(json.data()), json.size(), header.begin() + kLengthFieldBytes);
  return sizes;
}

// Streams one tensor through `fill` in chunks of `buffer`.
Status write_filled(TempFile& out, const WriterTensor& t, std::uint64_t nbytes, std::vector<std::byte>& buffer,
                    const std::string& path) {
  for (std::uint64_t done = 0; done < nbytes;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), nbytes - done));
    const std::uint64_t at = out.size();
    if (Status ok = t.fill(done, std::span(buffer.data(), n)); !ok)
      return fail(std::move(ok.error()).with_tensor(t.name).with_offset(at).with_file(path));
    QLOAD_TRY(out.append(std::span(buffer.data(), n)));
    done += n;
  }
  return {};
}

}  // namespace

Result<std::vector<std::byte>> build_safetensors_header(std::span<const WriterTensor> tensors,
                                                        const std::map<std::string, std::string>& metadata,
                                                        bool empty_metadata_entry) {
  std::vector<std::byte> header;
  QLOAD_TRY(header_and_sizes(tensors, metadata, empty_metadata_entry, header));
  return header;
}

Status write_safetensors(const std::string& path, std::span<const WriterTensor> tensors, const WriterOptions& options) {
  if (options.chunk_bytes == 0) return fail(Error(Errc::kInvalidArgument, "chunk_bytes must be > 0").with_file(path));
  std::vector<std::byte> header;
  auto sizes = header_and_sizes(tensors, options.metadata, options.empty_metadata_entry, header);
  if (!sizes) return fail(std::move(sizes.error()).with_file(path));
  std::uint64_t largest_fill = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].fill) largest_fill = std::max(largest_fill, (*sizes)[i]);
  QLOAD_ASSIGN_OR_RETURN(std::vector<std::byte> buffer,
                         allocate_bytes(std::min<std::uint64_t>(largest_fill, options.chunk_bytes), path));
  QLOAD_ASSIGN_OR_RETURN(TempFile out, TempFile::create_for(path));
  QLOAD_TRY(out.append(header));
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].fill) {
      QLOAD_TRY(write_filled(out, tensors[i], (*sizes)[i], buffer, path));
    } else {
      QLOAD_TRY(out.append(tensors[i].bytes));
    }
  }
  return out.commit();
}

}  // namespace qload::formats

// The GGUF header parser (qload/formats/gguf.hpp).
#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "../located_error.hpp"
#include "ggml_types.hpp"
#include "qload/formats/gguf.hpp"
#include "qload/formats/header_limits.hpp"

namespace qload::formats {
namespace {

constexpr std::uint32_t kMagic = 0x46554747;  // "GGUF", little endian
constexpr std::uint32_t kMaxDims = 4;         // GGML_MAX_DIMS
constexpr std::size_t kShownElements = 16;    // arrays longer than this are summarised

enum ValueType : std::uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
  kTypeCount = 13
};

std::string_view value_type_name(std::uint32_t t) {
  static constexpr std::string_view kNames[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                                "bool", "string", "array", "u64", "i64", "f64"};
  return t < kTypeCount ? kNames[t] : "unknown";
}

// Fixed sizes of the scalar value types (0: not a scalar).
std::uint64_t scalar_size(std::uint32_t t) {
  switch (t) {
    case kU8:
    case kI8:
    case kBool: return 1;
    case kU16:
    case kI16: return 2;
    case kU32:
    case kI32:
    case kF32: return 4;
    case kU64:
    case kI64:
    case kF64: return 8;
    default: return 0;
  }
}

// Reads little-endian values from the prefix; every read is checked against the prefix and
// the file, and running past the prefix (but not the file) asks for more bytes.
class Cursor {
 public:
  Cursor(std::span<const std::byte> prefix, std::uint64_t file_size, const std::string& path, std::uint64_t* wanted)
      : bytes_(prefix), file_size_(file_size), path_(path), wanted_(wanted) {}

  std::uint64_t offset() const noexcept { return at_; }
  std::uint64_t left_in_file() const noexcept { return file_size_ - at_; }

  Status need(std::uint64_t n, std::string_view what) {
    if (n > left_in_file())
      return fail(located(Errc::kTruncated,
                          fmt::format("{} needs {} bytes, the file has {} left", what, n, left_in_file()), path_,
                          tensor_, at_));
    // The header cap every format keeps (header_limits.hpp), checked before more is read:
    // at_ never passes it, so the subtraction cannot wrap.
    if (n > kMaxHeaderBytes - at_)
      return fail(located(
          Errc::kUnsupported,
          fmt::format("{}: the GGUF header runs past {} bytes, qload's limit for headers", what, kMaxHeaderBytes),
          path_, tensor_, at_));
    if (at_ + n > bytes_.size()) {
      if (wanted_ != nullptr) *wanted_ = at_ + n;
      return fail(
          located(Errc::kTruncated, fmt::format("{}: the header runs past the bytes read", what), path_, tensor_, at_));
    }
    return {};
  }

  template <typename T>
  Result<T> read(std::string_view what) {
    QLOAD_TRY(need(sizeof(T), what));
    T value;
    std::memcpy(&value, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return value;
  }

  // A string: u64 length, bytes. Its length is bounded by the file, so no allocation exceeds it.
  Result<std::string> string(std::string_view what) {
    QLOAD_ASSIGN_OR_RETURN(const std::uint64_t n, read<std::uint64_t>(what));
    QLOAD_TRY(need(n, what));
    std::string s(reinterpret_cast<const char*>(bytes_.data() + at_), static_cast<std::size_t>(n));
    at_ += n;
    return s;
  }

  Status skip(std::uint64_t n, std::string_view what) {
    QLOAD_TRY(need(n, what));
    at_ += n;
    return {};
  }

  Error error(Errc code, std::string message, std::optional<std::uint64_t> where = std::nullopt) const {
    return located(code, std::move(message), path_, tensor_, where.value_or(at_));
  }
  void set_tensor(std::string name) { tensor_ = std::move(name); }

 private:
  std::span<const std::byte> bytes_;
  std::uint64_t file_size_;
  const std::string& path_;
  std::uint64_t* wanted_;
  std::uint64_t at_ = 0;
  std::string tensor_;
};

// A number's text, as written.
template <typename T>
Result<std::string> number_text(Cursor& c, std::string_view what) {
  QLOAD_ASSIGN_OR_RETURN(const T v, c.read<T>(what));
  return fmt::format("{}", v);
}

// One scalar's text.
Result<std::string> scalar_text(Cursor& c, std::uint32_t type) {
  switch (type) {
    case kU8: return number_text<std::uint8_t>(c, "a u8");
    case kI8: return number_text<std::int8_t>(c, "an i8");
    case kU16: return number_text<std::uint16_t>(c, "a u16");
    case kI16: return number_text<std::int16_t>(c, "an i16");
    case kU32: return number_text<std::uint32_t>(c, "a u32");
    case kI32: return number_text<std::int32_t>(c, "an i32");
    case kU64: return number_text<std::uint64_t>(c, "a u64");
    case kI64: return number_text<std::int64_t>(c, "an i64");
    case kF32: return number_text<float>(c, "an f32");
    case kF64: return number_text<double>(c, "an f64");
    case kBool: {
      const std::uint64_t at = c.offset();
      QLOAD_ASSIGN_OR_RETURN(const std::uint8_t v, c.read<std::uint8_t>("a bool"));
      if (v > 1) return fail(c.error(Errc::kCorrupt, fmt::format("a bool of value {}", v), at));
      return std::string(v != 0 ? "true" : "false");
    }
    case kString: return c.string("a string value");
    default: return fail(c.error(Errc::kCorrupt, fmt::format("value type {}", type)));
  }
}

Result<GgufKeyValue> key_value(Cursor& c) {
  GgufKeyValue kv;
  QLOAD_ASSIGN_OR_RETURN(kv.key, c.string("a metadata key"));
  const std::uint64_t type_at = c.offset();
  QLOAD_ASSIGN_OR_RETURN(const std::uint32_t type, c.read<std::uint32_t>("a value type"));
  if (type >= kTypeCount)
    return fail(
        c.error(Errc::kCorrupt, fmt::format("key {}: unknown value type {}", quote_name(kv.key), type), type_at));
  if (type != kArray) {
    kv.type = value_type_name(type);
    QLOAD_ASSIGN_OR_RETURN(kv.value, scalar_text(c, type));
    return kv;
  }
  QLOAD_ASSIGN_OR_RETURN(const std::uint32_t element, c.read<std::uint32_t>("an array's element type"));
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t count, c.read<std::uint64_t>("an array's length"));
  if (element >= kTypeCount || element == kArray)
    return fail(c.error(Errc::kCorrupt,
                        fmt::format("key {}: arrays of {} are not allowed", quote_name(kv.key),
                                    element == kArray ? "arrays" : fmt::format("type {}", element)),
                        type_at));
  kv.type = fmt::format("array[{}]", value_type_name(element));
  // Every element takes at least its size (a string at least its u64 length): a count the
  // file cannot hold is refused before anything is allocated or looped over.
  const std::uint64_t least = element == kString ? 8 : scalar_size(element);
  if (count > c.left_in_file() / least)
    return fail(c.error(Errc::kCorrupt, fmt::format("key {}: {} elements cannot fit in the {} bytes left",
                                                    quote_name(kv.key), count, c.left_in_file())));
  if (count > kMaxHeaderEntries)
    return fail(c.error(Errc::kUnsupported, fmt::format("key {}: an array of {} elements (qload reads at most {})",
                                                        quote_name(kv.key), count, kMaxHeaderEntries)));
  if (count > kShownElements) {
    kv.value = fmt::format("[{} x {}]", count, value_type_name(element));
    if (element != kString) {
      QLOAD_TRY(c.skip(count * least, "an array"));
      return kv;
    }
    for (std::uint64_t i = 0; i < count; ++i) {
      QLOAD_ASSIGN_OR_RETURN(const std::uint64_t n, c.read<std::uint64_t>("a string's length"));
      QLOAD_TRY(c.skip(n, "a string"));
    }
    return kv;
  }
  std::string text = "[";
  for (std::uint64_t i = 0; i < count; ++i) {
    QLOAD_ASSIGN_OR_RETURN(std::string one, scalar_text(c, element));
    text += (i == 0 ? "" : ", ") + (element == kString ? "\"" + one + "\"" : one);
  }
  kv.value = text + "]";
  return kv;
}

Result<GgufTensorInfo> tensor_info(Cursor& c) {
  GgufTensorInfo t;
  t.info_offset = c.offset();
  QLOAD_ASSIGN_OR_RETURN(t.name, c.string("a tensor name"));
  c.set_tensor(t.name);
  QLOAD_ASSIGN_OR_RETURN(const std::uint32_t dims, c.read<std::uint32_t>("a tensor's dimension count"));
  if (dims > kMaxDims)
    return fail(c.error(Errc::kCorrupt, fmt::format("{} dimensions (ggml allows at most {})", dims, kMaxDims)));
  std::uint64_t elements = 1;
  for (std::uint32_t d = 0; d < dims; ++d) {
    QLOAD_ASSIGN_OR_RETURN(const std::uint64_t n, c.read<std::uint64_t>("a tensor dimension"));
    // ggml keeps sizes in int64_t: each and their product must fit.
    if (n > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
        (n != 0 && elements > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) / n))
      return fail(c.error(Errc::kOverflow, "the element count overflows"));
    elements *= n;
    t.ne.push_back(n);
  }
  const std::uint64_t type_at = c.offset();
  QLOAD_ASSIGN_OR_RETURN(t.ggml_type, c.read<std::uint32_t>("a tensor type"));
  const gguf::GgmlType* type = gguf::find_ggml_type(t.ggml_type);
  if (type == nullptr) return fail(c.error(Errc::kCorrupt, fmt::format("unknown ggml type {}", t.ggml_type), type_at));
  const std::uint64_t row = t.ne.empty() ? 1 : t.ne[0];
  if (row % type->block_elems != 0)
    return fail(c.error(
        Errc::kCorrupt,
        fmt::format("rows of {} elements are not whole {} blocks of {}", row, type->name, type->block_elems), type_at));
  const std::uint64_t blocks = elements / type->block_elems;
  if (blocks > std::numeric_limits<std::uint64_t>::max() / type->block_bytes)
    return fail(c.error(Errc::kOverflow, "the byte size overflows"));
  t.nbytes = blocks * type->block_bytes;
  QLOAD_ASSIGN_OR_RETURN(t.offset, c.read<std::uint64_t>("a tensor offset"));
  c.set_tensor({});
  return t;
}

}  // namespace

std::string ggml_type_name(std::uint32_t ggml_type) {
  const gguf::GgmlType* t = gguf::find_ggml_type(ggml_type);
  return t != nullptr ? std::string(t->name) : fmt::format("type {}", ggml_type);
}

GgmlBlockSize ggml_block_size(std::uint32_t ggml_type) {
  const gguf::GgmlType* type = gguf::find_ggml_type(ggml_type);
  return type == nullptr ? GgmlBlockSize{} : GgmlBlockSize{.elems = type->block_elems, .bytes = type->block_bytes};
}

Result<GgufHeader> parse_gguf_bytes(std::span<const std::byte> prefix, std::uint64_t file_size, const std::string& path,
                                    std::uint64_t* wanted) {
  if (prefix.size() > file_size) prefix = prefix.first(static_cast<std::size_t>(file_size));
  Cursor c(prefix, file_size, path, wanted);
  GgufHeader h;
  QLOAD_ASSIGN_OR_RETURN(const std::uint32_t magic, c.read<std::uint32_t>("the magic"));
  if (magic != kMagic) return fail(c.error(Errc::kCorrupt, "not a GGUF file (no \"GGUF\" magic)", 0));
  QLOAD_ASSIGN_OR_RETURN(h.version, c.read<std::uint32_t>("the version"));
  if (h.version == 1)
    return fail(c.error(Errc::kUnsupported, "GGUF version 1 (use a newer llama.cpp to convert it)", 4));
  if (h.version != 2 && h.version != 3)
    return fail(c.error(Errc::kUnsupported, fmt::format("GGUF version {} (qload reads 2 and 3)", h.version), 4));
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t tensor_count, c.read<std::uint64_t>("the tensor count"));
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t kv_count, c.read<std::uint64_t>("the key-value count"));
  // A key-value takes at least 8 + 4 + 1 bytes, a tensor info 8 + 4 + 4 + 8.
  if (kv_count > c.left_in_file() / 13)
    return fail(c.error(Errc::kCorrupt, fmt::format("{} key-values cannot fit in the file", kv_count), 16));
  if (tensor_count > c.left_in_file() / 24)
    return fail(c.error(Errc::kCorrupt, fmt::format("{} tensors cannot fit in the file", tensor_count), 8));
  // Counts the file could hold are bounded as in every format (header_limits.hpp), before any
  // entry is stored.
  if (tensor_count > kMaxHeaderEntries || kv_count > kMaxHeaderEntries - tensor_count)
    return fail(c.error(Errc::kUnsupported,
                        fmt::format("{} tensors and {} key-values (qload reads at most {} entries in all)",
                                    tensor_count, kv_count, kMaxHeaderEntries),
                        8));
  std::set<std::string, std::less<>> keys;
  for (std::uint64_t i = 0; i < kv_count; ++i) {
    const std::uint64_t at = c.offset();
    QLOAD_ASSIGN_OR_RETURN(GgufKeyValue kv, key_value(c));
    if (!keys.insert(kv.key).second)
      return fail(c.error(Errc::kCorrupt, fmt::format("duplicate key {}", quote_name(kv.key)), at));
    if (kv.key == "general.alignment") {
      std::uint64_t a = 0;
      const char* last = kv.value.data() + kv.value.size();
      if (kv.type != "u32" || std::from_chars(kv.value.data(), last, a).ptr != last || a == 0 ||
          !std::has_single_bit(a))
        return fail(c.error(
            Errc::kCorrupt,
            fmt::format("general.alignment must be a u32 power of two, not {} {}", kv.type, quote_name(kv.value)), at));
      h.alignment = a;
    }
    h.metadata.push_back(std::move(kv));
  }
  std::set<std::string, std::less<>> names;
  for (std::uint64_t i = 0; i < tensor_count; ++i) {
    QLOAD_ASSIGN_OR_RETURN(GgufTensorInfo t, tensor_info(c));
    if (!names.insert(t.name).second)
      return fail(located(Errc::kCorrupt, "duplicate tensor name", path, t.name, t.info_offset));
    h.tensors.push_back(std::move(t));
  }
  // The data section starts at the next multiple of the alignment; tensors are packed in
  // order, each at the padded end of the one before (llama.cpp refuses anything else).
  const std::uint64_t end = c.offset();
  h.data_offset = (end + h.alignment - 1) / h.alignment * h.alignment;
  if (!h.tensors.empty() && h.data_offset > file_size)  // a file of metadata alone needs no padding
    return fail(located(Errc::kTruncated, "the data section starts past the end of the file", path, {}, end));
  std::uint64_t expected = 0;
  for (const GgufTensorInfo& t : h.tensors) {
    if (t.offset != expected)
      return fail(located(Errc::kCorrupt,
                          fmt::format("data offset {} where the tensors before end at {} (GGUF packs tensors in "
                                      "order, each aligned to {})",
                                      t.offset, expected, h.alignment),
                          path, t.name, t.info_offset));
    if (t.offset > file_size - h.data_offset || t.nbytes > file_size - h.data_offset - t.offset)
      return fail(located(Errc::kTruncated,
                          fmt::format("its {} bytes run past the end of the file ({} bytes)", t.nbytes, file_size),
                          path, t.name, h.data_offset + t.offset));
    expected = t.offset + (t.nbytes + h.alignment - 1) / h.alignment * h.alignment;
  }
  return h;
}

}  // namespace qload::formats

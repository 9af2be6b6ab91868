#include "qload/runtime/error.hpp"
#include "qload/runtime/exception_error.hpp"

#include <cerrno>
#include <cstring>
#include <new>
#include <typeinfo>

#include <fmt/format.h>

#include "qload/runtime/utf8.hpp"

namespace qload {

std::string_view errc_name(Errc code) noexcept {
  switch (code) {
    case Errc::kInvalidArgument: return "invalid argument";
    case Errc::kNotFound: return "not found";
    case Errc::kPermissionDenied: return "permission denied";
    case Errc::kIo: return "I/O error";
    case Errc::kTruncated: return "truncated";
    case Errc::kOutOfMemory: return "out of memory";
    case Errc::kUnsupported: return "unsupported";
    case Errc::kCorrupt: return "corrupt";
    case Errc::kChecksumMismatch: return "checksum mismatch";
    case Errc::kOverflow: return "overflow";
    case Errc::kFileChanged: return "file changed";
    case Errc::kCancelled: return "cancelled";
    case Errc::kDevice: return "device error";
    case Errc::kInternal: return "internal error";
  }
  return "unknown error";
}

namespace {

Errc errc_from_errno(int err) {
  switch (err) {
    case ENOENT:
    case ENOTDIR: return Errc::kNotFound;
    case EACCES:
    case EPERM: return Errc::kPermissionDenied;
    case ENOMEM: return Errc::kOutOfMemory;
    case EINVAL: return Errc::kInvalidArgument;
    case EOPNOTSUPP:
    case ENOSYS: return Errc::kUnsupported;
    case EOVERFLOW:
    case EFBIG: return Errc::kOverflow;
    case ECANCELED: return Errc::kCancelled;
    default: return Errc::kIo;
  }
}

}  // namespace

Error Error::from_errno(int err, std::string_view what) {
  char buf[128];
  // GNU strerror_r returns the message pointer (maybe not buf); thread-safe unlike strerror.
  const char* text = strerror_r(err, buf, sizeof buf);
  Error e(errc_from_errno(err), fmt::format("{}: {}", what, text));
  e.errno_ = err;
  return e;
}

Error&& Error::with_file(std::string path) && {
  frames_.push_back(ErrorFrame{.file = std::move(path)});
  return std::move(*this);
}
Error&& Error::with_tensor(std::string name) && {
  frames_.push_back(ErrorFrame{.tensor = std::move(name)});
  return std::move(*this);
}
Error&& Error::with_offset(std::uint64_t offset) && {
  frames_.push_back(ErrorFrame{.offset = offset});
  return std::move(*this);
}
Error&& Error::with_note(std::string note) && {
  frames_.push_back(ErrorFrame{.note = std::move(note)});
  return std::move(*this);
}
Error&& Error::at(std::source_location where) && {
  frames_.push_back(ErrorFrame{.where = where, .has_where = true});
  return std::move(*this);
}

// Frames are appended innermost first, so the first hit is the most specific one.
std::optional<std::string_view> Error::file() const {
  for (const auto& f : frames_)
    if (!f.file.empty()) return f.file;
  return std::nullopt;
}
std::optional<std::string_view> Error::tensor() const {
  for (const auto& f : frames_)
    if (!f.tensor.empty()) return f.tensor;
  return std::nullopt;
}
std::optional<std::uint64_t> Error::offset() const {
  for (const auto& f : frames_)
    if (f.offset) return f.offset;
  return std::nullopt;
}

std::string escape_for_terminal(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    const std::size_t len = utf8_sequence_length(text.substr(i));
    // C0 controls, DEL, and C1 controls (U+0080..U+009F, encoded C2 80..C2 9F: some
    // terminals act on them, e.g. U+009B is CSI).
    const bool control = (len == 1 && (c < 0x20 || c == 0x7F)) ||
                         (len == 2 && c == 0xC2 && static_cast<unsigned char>(text[i + 1]) < 0xA0);
    if (len == 0 || control || c == '\\') {
      const std::size_t n = len == 0 ? 1 : len;
      for (std::size_t k = 0; k < n; ++k) {
        const auto b = static_cast<unsigned char>(text[i + k]);
        out += b == '\\' ? std::string("\\\\") : fmt::format("\\x{:02x}", b);
      }
      i += n;
      continue;
    }
    out.append(text.substr(i, len));
    i += len;
  }
  return out;
}

std::string escape_and_cap(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return escape_for_terminal(text);
  // A UTF-8 sequence cut at the end prints as \xNN escapes: harmless.
  return fmt::format("{}... ({} bytes)", escape_for_terminal(text.substr(0, max_bytes)), text.size());
}

std::string Error::to_string() const {
  // The message may quote untrusted names too: it gets the same escaping, and every part is
  // capped so a 4 MB tensor name cannot become a 4 MB error line.
  std::string out = fmt::format("{}: {}", errc_name(code_), escape_and_cap(message_, kMaxMessageBytes));
  std::vector<std::string> parts;
  std::vector<std::string> notes;
  if (auto f = file()) parts.push_back(fmt::format("file '{}'", escape_and_cap(*f, kMaxNameBytes)));
  if (auto t = tensor()) parts.push_back(fmt::format("tensor '{}'", escape_and_cap(*t, kMaxNameBytes)));
  if (auto o = offset()) parts.push_back(fmt::format("offset {}", *o));
  for (const auto& f : frames_)
    if (!f.note.empty()) notes.push_back(escape_and_cap(f.note, kMaxNameBytes));
  if (!notes.empty()) parts.push_back(fmt::format("{}", fmt::join(notes, "; ")));
  if (!parts.empty()) out += fmt::format(" ({})", fmt::join(parts, ", "));
  return out;
}

std::string Error::to_string_with_trace() const {
  std::string out = to_string();
  for (const auto& f : frames_)
    if (f.has_where)
      out += fmt::format("\n  at {}:{} ({})", f.where.file_name(), f.where.line(), f.where.function_name());
  return out;
}

Error error_from_exception(const std::exception_ptr& exception, std::string_view where) {
  try {
    std::rethrow_exception(exception);
  } catch (const std::bad_alloc& e) {
    return Error(Errc::kOutOfMemory, fmt::format("{}: memory allocation failed ({})", where, e.what()));
  } catch (const std::exception& e) {
    return Error(Errc::kInternal, fmt::format("{}: unexpected exception {}: {}", where, typeid(e).name(), e.what()));
  } catch (...) {
    return Error(Errc::kInternal,
                 fmt::format("{}: unexpected exception of a type not derived from std::exception", where));
  }
}

}  // namespace qload

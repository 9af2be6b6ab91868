// Error values and Result<T>: the only way failures cross a layer boundary.
//
// An Error is a code (what kind of failure, stable, maps to exit codes), a message (what
// happened, for humans) and a chain of context frames added on the way up (which file,
// tensor and byte offset; which source line passed it on). Nothing in qload throws across a
// layer: functions that can fail return Result<T> = std::expected<T, Error>.
//
// g++ 12's <expected> has no and_then/transform, so propagation is done with QLOAD_TRY and
// QLOAD_ASSIGN_OR_RETURN, which also append the call site to the error's frames.
#pragma once

#include <cstddef>
#include <cstdint>
#include <expected>
#include <optional>
#include <source_location>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qload {

// Kinds of failure. Stable: the CLI maps them to exit codes and embedders switch on them.
enum class Errc : std::uint8_t {
  kInvalidArgument,   // the caller asked for something malformed (bad option, bad range)
  kNotFound,          // file or tensor does not exist
  kPermissionDenied,  // EACCES / EPERM
  kIo,                // the OS reported an I/O failure (EIO, ...)
  kTruncated,         // fewer bytes exist than the format or request says
  kOutOfMemory,       // host allocation or kernel memory (ENOMEM) failed
  kUnsupported,       // valid input qload does not handle, or a facility missing here
  kCorrupt,           // malformed file contents (header, index, ...)
  kChecksumMismatch,  // bytes read differ from their recorded digest
  kOverflow,          // a size, offset or shape product does not fit
  kFileChanged,       // a file changed while it was being loaded
  kCancelled,         // the load was aborted on request
  kDevice,            // GPU / driver failure
  kInternal,          // a bug in qload; reported rather than crashing
};

std::string_view errc_name(Errc code) noexcept;

// One step of context. Any subset of the fields may be set.
struct ErrorFrame {
  std::string file;                     // path of the file involved
  std::string tensor;                   // tensor name involved
  std::optional<std::uint64_t> offset;  // byte offset in `file`
  std::string note;                     // free text ("while reading shard 3")
  std::source_location where{};         // code that added this frame (empty if unset)
  bool has_where = false;
};

class [[nodiscard]] Error {
 public:
  Error(Errc code, std::string message) : code_(code), message_(std::move(message)) {}

  // Builds an error from an errno value: the code follows the errno, the message gets
  // strerror appended ("open: No such file or directory").
  static Error from_errno(int err, std::string_view what);

  Errc code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }
  const std::vector<ErrorFrame>& frames() const noexcept { return frames_; }
  // The errno this error came from, or 0.
  int sys_errno() const noexcept { return errno_; }

  // Context builders: each adds a frame; chainable on temporaries.
  Error&& with_file(std::string path) &&;
  Error&& with_tensor(std::string name) &&;
  Error&& with_offset(std::uint64_t offset) &&;
  Error&& with_note(std::string note) &&;
  Error&& at(std::source_location where = std::source_location::current()) &&;

  // The innermost file / tensor / offset recorded in the frames, if any.
  std::optional<std::string_view> file() const;
  std::optional<std::string_view> tensor() const;
  std::optional<std::uint64_t> offset() const;

  // One line: "<code>: <message> (file 'f', tensor 't', offset N; <notes>)". Control
  // characters in names are escaped so a hostile tensor name cannot drive the terminal, and
  // each part is cut (saying its full length) beyond kMaxMessageBytes / kMaxNameBytes.
  std::string to_string() const;
  // Like to_string, followed by one line per source location frame.
  std::string to_string_with_trace() const;

 private:
  Errc code_;
  std::string message_;
  std::vector<ErrorFrame> frames_;
  int errno_ = 0;
};

template <typename T>
using Result = std::expected<T, Error>;
using Status = Result<void>;

inline std::unexpected<Error> fail(Errc code, std::string message) {
  return std::unexpected<Error>(Error(code, std::move(message)));
}
inline std::unexpected<Error> fail(Error error) {
  return std::unexpected<Error>(std::move(error));
}

// Escapes control characters and invalid UTF-8 bytes as \xNN so names print safely.
std::string escape_for_terminal(std::string_view text);
// escape_for_terminal of at most the first `max_bytes` of `text`, then "... (N bytes)" when cut.
std::string escape_and_cap(std::string_view text, std::size_t max_bytes);

inline constexpr std::size_t kMaxMessageBytes = 2048;  // of an error's message, as printed
inline constexpr std::size_t kMaxNameBytes = 256;      // of a file, tensor or note, as printed

}  // namespace qload

#define QLOAD_CONCAT_INNER_(a, b) a##b
#define QLOAD_CONCAT_(a, b) QLOAD_CONCAT_INNER_(a, b)

// Evaluates `expr` (a Result<T> or Status); on error returns it from the enclosing function
// with this call site appended.
#define QLOAD_TRY(expr)                                                                \
  do {                                                                                 \
    auto&& qload_try_result_ = (expr);                                                 \
    if (!qload_try_result_.has_value()) [[unlikely]]                                   \
      return ::std::unexpected<::qload::Error>(                                        \
          ::std::move(qload_try_result_).error().at(std::source_location::current())); \
  } while (false)

#define QLOAD_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr)                                                        \
  auto tmp = (expr);                                                                                        \
  if (!tmp.has_value()) [[unlikely]]                                                                        \
    return ::std::unexpected<::qload::Error>(::std::move(tmp).error().at(std::source_location::current())); \
  lhs = ::std::move(*tmp)

// `QLOAD_ASSIGN_OR_RETURN(auto x, make_x());` declares x from the value or returns the error.
#define QLOAD_ASSIGN_OR_RETURN(lhs, expr) QLOAD_ASSIGN_OR_RETURN_IMPL_(QLOAD_CONCAT_(qload_aor_, __LINE__), lhs, expr)

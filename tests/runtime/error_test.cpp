// Error values, context chaining, errno mapping, QLOAD_TRY / QLOAD_ASSIGN_OR_RETURN and the
// terminal escaping used when names from untrusted files are printed.
#include <catch2/catch.hpp>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "qload/runtime/error.hpp"

namespace {

using qload::Errc;
using qload::Error;
using qload::Result;
using qload::Status;

bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

// --- A small call stack for the chaining test -------------------------------------------
// The innermost function fails with file/tensor/offset context; two callers propagate it,
// one with QLOAD_ASSIGN_OR_RETURN and one with QLOAD_TRY, and the outer one adds context of
// its own, which must not shadow the innermost values.

int g_assign_line = 0;  // line of the QLOAD_ASSIGN_OR_RETURN site
int g_try_line = 0;     // line of the QLOAD_TRY site

Result<std::uint64_t> read_tensor_header_deep() {
  return qload::fail(
      Error(Errc::kCorrupt, "header length exceeds file size").with_offset(123).with_tensor("y").with_file("x"));
}

Result<std::uint64_t> middle_layer_assign() {
  g_assign_line = __LINE__ + 1;
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t length, read_tensor_header_deep());
  return length + 1;
}

Status outer_layer_try() {
  g_try_line = __LINE__ + 1;
  QLOAD_TRY(middle_layer_assign());
  return {};
}

Status outermost_adds_context() {
  auto status = outer_layer_try();
  if (!status)
    return qload::fail(std::move(status).error().with_file("outer.safetensors").with_tensor("outer").with_offset(999));
  return {};
}

}  // namespace

TEST_CASE("Error keeps its code and message", "[error]") {
  const Error e(Errc::kTruncated, "need 16 bytes, have 3");
  CHECK(e.code() == Errc::kTruncated);
  CHECK(e.message() == "need 16 bytes, have 3");
  CHECK(e.frames().empty());
  CHECK(e.sys_errno() == 0);
  CHECK_FALSE(e.file().has_value());
  CHECK_FALSE(e.tensor().has_value());
  CHECK_FALSE(e.offset().has_value());
  CHECK(e.to_string() == "truncated: need 16 bytes, have 3");
}

TEST_CASE("errc_name gives a distinct readable name for every code", "[error]") {
  CHECK(qload::errc_name(Errc::kInvalidArgument) == "invalid argument");
  CHECK(qload::errc_name(Errc::kNotFound) == "not found");
  CHECK(qload::errc_name(Errc::kPermissionDenied) == "permission denied");
  CHECK(qload::errc_name(Errc::kIo) == "I/O error");
  CHECK(qload::errc_name(Errc::kTruncated) == "truncated");
  CHECK(qload::errc_name(Errc::kOutOfMemory) == "out of memory");
  CHECK(qload::errc_name(Errc::kUnsupported) == "unsupported");
  CHECK(qload::errc_name(Errc::kCorrupt) == "corrupt");
  CHECK(qload::errc_name(Errc::kChecksumMismatch) == "checksum mismatch");
  CHECK(qload::errc_name(Errc::kOverflow) == "overflow");
  CHECK(qload::errc_name(Errc::kFileChanged) == "file changed");
  CHECK(qload::errc_name(Errc::kCancelled) == "cancelled");
  CHECK(qload::errc_name(Errc::kDevice) == "device error");
  CHECK(qload::errc_name(Errc::kInternal) == "internal error");
}

TEST_CASE("Error codes keep their stable numeric values", "[error]") {
  // The CLI maps these to exit codes and embedders switch on them.
  CHECK(static_cast<int>(Errc::kInvalidArgument) == 0);
  CHECK(static_cast<int>(Errc::kNotFound) == 1);
  CHECK(static_cast<int>(Errc::kPermissionDenied) == 2);
  CHECK(static_cast<int>(Errc::kIo) == 3);
  CHECK(static_cast<int>(Errc::kTruncated) == 4);
  CHECK(static_cast<int>(Errc::kOutOfMemory) == 5);
  CHECK(static_cast<int>(Errc::kUnsupported) == 6);
  CHECK(static_cast<int>(Errc::kCorrupt) == 7);
  CHECK(static_cast<int>(Errc::kChecksumMismatch) == 8);
  CHECK(static_cast<int>(Errc::kOverflow) == 9);
  CHECK(static_cast<int>(Errc::kFileChanged) == 10);
  CHECK(static_cast<int>(Errc::kCancelled) == 11);
  CHECK(static_cast<int>(Errc::kDevice) == 12);
  CHECK(static_cast<int>(Errc::kInternal) == 13);
}

TEST_CASE("Context propagated through QLOAD_TRY and QLOAD_ASSIGN_OR_RETURN keeps the innermost values", "[error]") {
  const Status status = outermost_adds_context();
  REQUIRE_FALSE(status.has_value());
  const Error& e = status.error();

  CHECK(e.code() == Errc::kCorrupt);
  CHECK(e.message() == "header length exceeds file size");
  REQUIRE(e.file().has_value());
  CHECK(*e.file() == "x");
  REQUIRE(e.tensor().has_value());
  CHECK(*e.tensor() == "y");
  REQUIRE(e.offset().has_value());
  CHECK(*e.offset() == 123);

  // 3 context frames deep, 2 call-site frames, 3 outer context frames.
  REQUIRE(e.frames().size() == 8);
  CHECK(e.frames()[3].has_where);
  CHECK(e.frames()[3].where.line() == static_cast<std::uint_least32_t>(g_assign_line));
  CHECK(e.frames()[4].has_where);
  CHECK(e.frames()[4].where.line() == static_cast<std::uint_least32_t>(g_try_line));

  const std::string text = e.to_string();
  CAPTURE(text);
  CHECK(text.rfind("corrupt: header length exceeds file size", 0) == 0);
  CHECK(contains(text, "file 'x'"));
  CHECK(contains(text, "tensor 'y'"));
  CHECK(contains(text, "offset 123"));
  CHECK_FALSE(contains(text, "outer.safetensors"));
  CHECK_FALSE(contains(text, "999"));
  CHECK(text == "corrupt: header length exceeds file size (file 'x', tensor 'y', offset 123)");
}

TEST_CASE("to_string_with_trace lists the QLOAD_TRY and QLOAD_ASSIGN_OR_RETURN call sites", "[error]") {
  const Status status = outermost_adds_context();
  REQUIRE_FALSE(status.has_value());
  const std::string trace = status.error().to_string_with_trace();
  CAPTURE(trace);

  CHECK(trace.rfind(status.error().to_string(), 0) == 0);
  CHECK(contains(trace, "error_test.cpp:" + std::to_string(g_assign_line)));
  CHECK(contains(trace, "error_test.cpp:" + std::to_string(g_try_line)));
  CHECK(contains(trace, "middle_layer_assign"));
  CHECK(contains(trace, "outer_layer_try"));
  // The assign site is deeper, so it is listed first.
  CHECK(trace.find("middle_layer_assign") < trace.find("outer_layer_try"));
  // Exactly one "at" line per call-site frame.
  std::size_t at_lines = 0;
  for (std::size_t pos = 0; (pos = trace.find("\n  at ", pos)) != std::string::npos; ++pos) ++at_lines;
  CHECK(at_lines == 2);
}

TEST_CASE("to_string joins notes after file, tensor and offset", "[error]") {
  const Error e = Error(Errc::kIo, "short read")
                      .with_note("while reading shard 3")
                      .with_file("model-00003.safetensors")
                      .with_note("during prefetch");
  CHECK(e.to_string() ==
        "I/O error: short read (file 'model-00003.safetensors', while reading shard 3; during prefetch)");
}

TEST_CASE("to_string escapes control characters in file and tensor names", "[error]") {
  const Error e = Error(Errc::kCorrupt, "bad").with_tensor("evil\x1b[2Jname").with_file("a\nb");
  const std::string text = e.to_string();
  CHECK(text == "corrupt: bad (file 'a\\x0ab', tensor 'evil\\x1b[2Jname')");
  CHECK_FALSE(contains(text, "\x1b"));
  CHECK_FALSE(contains(text, "\n"));
  // The accessors still give the raw names.
  CHECK(*e.tensor() == "evil\x1b[2Jname");
}

TEST_CASE("to_string cuts long names and messages, saying their full length", "[error]") {
  const std::string huge(4 << 20, 'n');
  const Error e = Error(Errc::kCorrupt, "bad name " + huge).with_file("/m/" + huge).with_tensor(huge);
  const std::string line = e.to_string();
  CHECK(line.size() < qload::kMaxMessageBytes + 3 * qload::kMaxNameBytes + 200);
  CHECK_THAT(line, Catch::Contains(fmt::format("... ({} bytes)", huge.size() + 9)));  // the message
  CHECK_THAT(line, Catch::Contains(fmt::format("... ({} bytes)", huge.size() + 3)));  // the file
  CHECK_THAT(line, Catch::Contains(fmt::format("... ({} bytes)'", huge.size())));     // the tensor
  CHECK(e.tensor()->size() == huge.size());  // the error itself keeps the whole name
  const std::string short_name(qload::kMaxNameBytes, 't');
  CHECK_THAT(Error(Errc::kCorrupt, "x").with_tensor(short_name).to_string(),
             Catch::EndsWith("tensor '" + short_name + "')"));
}

TEST_CASE("with_offset of zero is recorded as an offset", "[error]") {
  const Error e = Error(Errc::kCorrupt, "bad magic").with_offset(0);
  REQUIRE(e.offset().has_value());
  CHECK(*e.offset() == 0);
  CHECK(contains(e.to_string(), "offset 0"));
}

TEST_CASE("from_errno maps errno values to codes and keeps the errno", "[error]") {
  struct Case {
    int err;
    Errc code;
  };
  const Case cases[] = {
      {ENOENT, Errc::kNotFound},
      {ENOTDIR, Errc::kNotFound},
      {EACCES, Errc::kPermissionDenied},
      {EPERM, Errc::kPermissionDenied},
      {ENOMEM, Errc::kOutOfMemory},
      {EIO, Errc::kIo},
      {EINVAL, Errc::kInvalidArgument},
      {EOVERFLOW, Errc::kOverflow},
      {EFBIG, Errc::kOverflow},
      {ENOSYS, Errc::kUnsupported},
      {EOPNOTSUPP, Errc::kUnsupported},
      {ECANCELED, Errc::kCancelled},
      {ENOSPC, Errc::kIo},
      {EBADF, Errc::kIo},
  };
  for (const Case& c : cases) {
    CAPTURE(c.err);
    const Error e = Error::from_errno(c.err, "open");
    CHECK(e.code() == c.code);
    CHECK(e.sys_errno() == c.err);
  }
}

TEST_CASE("from_errno appends strerror text to what failed", "[error]") {
  const Error e = Error::from_errno(ENOENT, "open");
  CHECK(e.message() == "open: No such file or directory");
  CHECK(e.to_string() == "not found: open: No such file or directory");
  const Error eio = Error::from_errno(EIO, "pread");
  CHECK(eio.message() == "pread: Input/output error");
}

TEST_CASE("sys_errno survives context and propagation", "[error]") {
  auto inner = []() -> Result<int> { return qload::fail(Error::from_errno(EACCES, "open").with_file("f")); };
  auto outer = [&]() -> Result<int> {
    QLOAD_ASSIGN_OR_RETURN(int v, inner());
    return v;
  };
  const auto r = outer();
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().sys_errno() == EACCES);
  CHECK(r.error().code() == Errc::kPermissionDenied);
  CHECK(*r.error().file() == "f");
}

TEST_CASE("QLOAD_TRY passes success through without adding frames", "[error]") {
  int calls = 0;
  auto ok = [&]() -> Status {
    ++calls;
    return {};
  };
  auto caller = [&]() -> Result<int> {
    QLOAD_TRY(ok());
    QLOAD_TRY(ok());
    return 7;
  };
  const auto r = caller();
  REQUIRE(r.has_value());
  CHECK(*r == 7);
  CHECK(calls == 2);  // evaluated exactly once per TRY
}

TEST_CASE("QLOAD_TRY stops at the first failure", "[error]") {
  int after = 0;
  auto bad = []() -> Result<int> { return qload::fail(Errc::kCancelled, "stop"); };
  auto caller = [&]() -> Status {
    QLOAD_TRY(bad());
    ++after;
    return {};
  };
  const auto r = caller();
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code() == Errc::kCancelled);
  CHECK(after == 0);
  REQUIRE(r.error().frames().size() == 1);
  CHECK(r.error().frames()[0].has_where);
}

TEST_CASE("QLOAD_ASSIGN_OR_RETURN works with a move-only type", "[error]") {
  auto make = [](bool ok) -> Result<std::unique_ptr<int>> {
    if (!ok) return qload::fail(Errc::kOutOfMemory, "no");
    return std::make_unique<int>(42);
  };
  auto use = [&](bool ok) -> Result<std::unique_ptr<int>> {
    QLOAD_ASSIGN_OR_RETURN(auto p, make(ok));
    QLOAD_ASSIGN_OR_RETURN(std::unique_ptr<int> q, make(ok));
    *p += *q;
    return p;
  };
  auto good = use(true);
  REQUIRE(good.has_value());
  REQUIRE(*good != nullptr);
  CHECK(**good == 84);

  auto bad = use(false);
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().code() == Errc::kOutOfMemory);
  CHECK(bad.error().frames().size() == 1);
}

TEST_CASE("QLOAD_ASSIGN_OR_RETURN can assign to an existing variable", "[error]") {
  auto make = []() -> Result<std::string> { return std::string("value"); };
  auto use = [&]() -> Result<std::string> {
    std::string s;
    QLOAD_ASSIGN_OR_RETURN(s, make());
    return s + "!";
  };
  const auto r = use();
  REQUIRE(r.has_value());
  CHECK(*r == "value!");
}

TEST_CASE("fail builds an unexpected Error", "[error]") {
  const Result<int> r = qload::fail(Errc::kUnsupported, "F6 on this device");
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code() == Errc::kUnsupported);
  CHECK(r.error().message() == "F6 on this device");
}

// --- escape_for_terminal -------------------------------------------------------------------

TEST_CASE("escape_for_terminal leaves printable ASCII alone", "[error][escape]") {
  CHECK(qload::escape_for_terminal("") == "");
  CHECK(qload::escape_for_terminal("model.layers.0.self_attn.q_proj.weight") ==
        "model.layers.0.self_attn.q_proj.weight");
  CHECK(qload::escape_for_terminal(" ~'\"") == " ~'\"");
}

TEST_CASE("escape_for_terminal escapes C0 control characters and DEL as \\xNN", "[error][escape]") {
  CHECK(qload::escape_for_terminal("\x1b[31mred") == "\\x1b[31mred");
  CHECK(qload::escape_for_terminal("a\nb\tc\rd") == "a\\x0ab\\x09c\\x0dd");
  CHECK(qload::escape_for_terminal(std::string_view("\0", 1)) == "\\x00");
  CHECK(qload::escape_for_terminal("\x7f") == "\\x7f");
  CHECK(qload::escape_for_terminal("\x01\x1f") == "\\x01\\x1f");
}

TEST_CASE("escape_for_terminal escapes backslash so escapes are unambiguous", "[error][escape]") {
  CHECK(qload::escape_for_terminal("a\\b") == "a\\\\b");
  // A literal "\x1b" text and a real ESC byte print differently.
  CHECK(qload::escape_for_terminal("\\x1b") != qload::escape_for_terminal("\x1b"));
  CHECK(qload::escape_for_terminal("\\x1b") == "\\\\x1b");
}

TEST_CASE("escape_for_terminal keeps valid multi-byte UTF-8 intact", "[error][escape]") {
  const std::string two = "caf\xc3\xa9";                 // café (U+00E9)
  const std::string three = "\xe6\x97\xa5\xe6\x9c\xac";  // 日本 (U+65E5 U+672C)
  const std::string four = "\xf0\x9f\x98\x80";           // U+1F600
  const std::string max = "\xf4\x8f\xbf\xbf";            // U+10FFFF
  CHECK(qload::escape_for_terminal(two) == two);
  CHECK(qload::escape_for_terminal(three) == three);
  CHECK(qload::escape_for_terminal(four) == four);
  CHECK(qload::escape_for_terminal(max) == max);
  CHECK(qload::escape_for_terminal(two + "\x1b" + four) == two + "\\x1b" + four);
}

TEST_CASE("escape_for_terminal escapes invalid UTF-8 bytes one by one", "[error][escape]") {
  // Lone continuation byte.
  CHECK(qload::escape_for_terminal("a\x80z") == "a\\x80z");
  // Bytes that never occur in UTF-8.
  CHECK(qload::escape_for_terminal("\xff\xfe") == "\\xff\\xfe");
  // A two-byte lead followed by ASCII: the lead is escaped, the ASCII is kept.
  CHECK(qload::escape_for_terminal("\xc3"
                                   "A") == "\\xc3A");
  // Truncated sequences at the end of the text.
  CHECK(qload::escape_for_terminal("ok\xe6\x97") == "ok\\xe6\\x97");
  CHECK(qload::escape_for_terminal("\xf0\x9f\x98") == "\\xf0\\x9f\\x98");
}

TEST_CASE("escape_for_terminal escapes overlong, surrogate and out-of-range UTF-8", "[error][escape]") {
  // RFC 3629 forbids these; they are "invalid UTF-8 bytes" per the header contract and
  // must not reach a terminal or a JSON/log consumer unescaped.
  CHECK(qload::escape_for_terminal("\xc0\xaf") == "\\xc0\\xaf");                    // overlong '/'
  CHECK(qload::escape_for_terminal("\xc1\xbf") == "\\xc1\\xbf");                    // overlong DEL
  CHECK(qload::escape_for_terminal("\xe0\x80\x80") == "\\xe0\\x80\\x80");           // overlong NUL
  CHECK(qload::escape_for_terminal("\xed\xa0\x80") == "\\xed\\xa0\\x80");           // U+D800 surrogate
  CHECK(qload::escape_for_terminal("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");  // U+110000
  CHECK(qload::escape_for_terminal("\xf5\x80\x80\x80") == "\\xf5\\x80\\x80\\x80");  // lead F5
}

TEST_CASE("escape_for_terminal escapes C1 control characters", "[error][escape]") {
  // U+009B is CSI, U+0085 NEL: control characters, encoded as valid two-byte UTF-8.
  CHECK(qload::escape_for_terminal("\xc2\x9b"
                                   "2J") !=
        "\xc2\x9b"
        "2J");
  CHECK(qload::escape_for_terminal("a\xc2\x85"
                                   "b")
            .find("\xc2\x85") == std::string::npos);
  // U+00A0 (first code point after the C1 block) is printable and kept.
  CHECK(qload::escape_for_terminal("\xc2\xa0") == "\xc2\xa0");
}

// torch.save files (torch_file.hpp) on bytes built here (torch_bytes.hpp): the zip directory,
// the restricted unpickler and the catalog over storages. Files torch itself wrote, every
// dtype and a transformers checkpoint are python.clients (test_torch_bin.py).
#include <catch2/catch.hpp>

#include <cstring>

#include "formats_test_support.hpp"
#include "qload/formats/driver.hpp"
#include "qload/formats/torch_file.hpp"
#include "torch_bytes.hpp"

using namespace qload;
using namespace qload::testing;

namespace {

std::vector<std::byte> text(const std::string& s) {
  std::vector<std::byte> out;
  for (const char c : s) out.push_back(static_cast<std::byte>(c));
  return out;
}

Result<std::vector<formats::PickledTensor>> unpickle(const PickleBytes& p) {
  return formats::read_state_dict_pickle(p.bytes, "t.pkl");
}

}  // namespace

TEST_CASE("torch: a state dict pickle becomes its tensors, tied and viewed ones included", "[formats][torch]") {
  PickleBytes p;
  p.begin_dict()
      .tensor("w", "FloatStorage", "0", 6, 0, {2, 3}, {3, 1})
      .tensor("rows", "FloatStorage", "0", 6, 3, {1, 3}, {3, 1})
      .tensor("ids", "LongStorage", "1", 8, 2, {4}, {1})
      .tensor("empty", "HalfStorage", "2", 0, 0, {0, 4}, {4, 1})
      .end_dict();
  const auto t = unpickle(p);
  if (!t) FAIL(t.error().to_string());
  REQUIRE(t->size() == 4);
  CHECK((*t)[1].name == "rows");
  CHECK((*t)[1].storage_offset == 3);
  CHECK((*t)[2].dtype == DType::kI64);
  CHECK((*t)[2].storage_bytes == 64);
  CHECK((*t)[3].size == std::vector<std::uint64_t>{0, 4});

  ScratchDir dir;
  std::vector<std::byte> floats(24), longs(64);
  for (int i = 0; i < 6; ++i) {
    const float f = static_cast<float>(i);
    std::memcpy(floats.data() + 4 * i, &f, 4);
  }
  for (std::int64_t i = 0; i < 8; ++i) std::memcpy(longs.data() + 8 * i, &i, 8);
  write_file(dir.file("m.pt"), zip_stored({{"m/data.pkl", p.bytes},
                                           {"m/data/0", floats},
                                           {"m/data/1", longs},
                                           {"m/data/2", {}},
                                           {"m/byteorder", text("little")}}));
  const auto catalog = formats::open_catalog(dir.file("m.pt"));
  if (!catalog) FAIL(catalog.error().to_string());
  CHECK(catalog->format == "pytorch");
  const formats::TensorEntry* rows = catalog->find("rows");
  const formats::TensorEntry* w = catalog->find("w");
  REQUIRE((rows != nullptr && w != nullptr));
  CHECK(rows->offset == w->offset + 12);  // row 1 of the same storage
  CHECK(read_file_range(dir.file("m.pt"), rows->offset, 12) ==
        std::vector<std::byte>(floats.begin() + 12, floats.end()));
  const formats::TensorEntry* ids = catalog->find("ids");
  std::int64_t first = 0;
  std::memcpy(&first, read_file_range(dir.file("m.pt"), ids->offset, 8).data(), 8);
  CHECK(first == 2);
  CHECK(catalog->find("empty")->nbytes == 0);
}

TEST_CASE("torch: pickles that do more than rebuild tensors are refused, naming what they do", "[formats][torch]") {
  struct Case {
    const char* label;
    PickleBytes pickle;
    Errc code;
    const char* message;
  };
  std::vector<Case> cases;
  {
    PickleBytes p;
    p.op(0x80).op(2).global("posix", "system").str("echo pwned").op(0x85).op('R').op('.');
    cases.push_back({"os.system", p, Errc::kUnsupported, "refuses global 'posix.system'"});
  }
  {
    PickleBytes p;
    p.op(0x80).op(2).str("builtins").str("exec").op(0x93).op('.');
    cases.push_back({"STACK_GLOBAL exec", p, Errc::kUnsupported, "'builtins.exec'"});
  }
  {
    PickleBytes p;
    p.op(0x80).op(2).op('j').u32(0x7fffffff).op('.');
    cases.push_back({"huge memo index", p, Errc::kCorrupt, "memo entry 2147483647 was never stored"});
  }
  {
    PickleBytes p;
    p.op(0x80).op(2);
    for (int i = 0; i < 100; ++i) p.op(']');
    for (int i = 0; i < 99; ++i) p.op('a');
    p.op('.');
    cases.push_back({"deep nesting", p, Errc::kUnsupported, "nested over 64 deep"});
  }
  {
    PickleBytes p;
    p.begin_dict().tensor("w", "FloatStorage", "0", 6, 0, {2, 3}, {3, 1});
    cases.push_back({"no STOP", p, Errc::kCorrupt, "ends without STOP"});
  }
  {
    PickleBytes p;
    p.op(0x80).op(2).op(']').op('.');
    cases.push_back({"a list", p, Errc::kUnsupported, "something other than a dict of tensors"});
  }
  {
    PickleBytes p;
    p.op(0x80).op(2).op('}').op('(').str("n").integer(3).op('u').op('.');
    cases.push_back({"an int value", p, Errc::kUnsupported, "not a tensor"});
  }
  {
    PickleBytes p;
    p.op(0x80).op(2).op('B');
    cases.push_back({"unknown opcode", p, Errc::kUnsupported, "opcode 0x42"});
  }
  for (const Case& c : cases) {
    INFO(c.label);
    const auto r = unpickle(c.pickle);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == c.code);
    CHECK_THAT(r.error().to_string(), Catch::Contains(c.message));
    CHECK(r.error().file() == "t.pkl");
  }
}

TEST_CASE("torch: broken archives and storages are refused, naming file and tensor", "[formats][torch]") {
  PickleBytes p;
  p.begin_dict().tensor("w", "FloatStorage", "0", 6, 0, {2, 3}, {3, 1}).end_dict();
  ScratchDir dir;
  const auto open = [&](const std::vector<std::byte>& bytes) {
    write_file(dir.file("m.pt"), bytes);
    return formats::open_catalog(dir.file("m.pt"));
  };
  const std::vector<std::byte> good = zip_stored({{"a/data.pkl", p.bytes}, {"a/data/0", std::vector<std::byte>(24)}});
  REQUIRE(open(good));
  // A storage shorter than its tensor.
  auto short_storage = open(zip_stored({{"a/data.pkl", p.bytes}, {"a/data/0", std::vector<std::byte>(20)}}));
  REQUIRE_FALSE(short_storage);
  CHECK(short_storage.error().code() == Errc::kCorrupt);
  CHECK(short_storage.error().tensor() == std::optional<std::string_view>("w"));
  // A storage the archive lacks.
  auto missing = open(zip_stored({{"a/data.pkl", p.bytes}}));
  REQUIRE_FALSE(missing);
  CHECK_THAT(missing.error().to_string(), Catch::Contains("storage '0' is not in the archive"));
  // Every truncation of the archive.
  for (std::size_t cut = 0; cut < good.size(); cut += 7) {
    INFO("cut at " << cut);
    const auto r = open(std::vector<std::byte>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(cut)));
    REQUIRE_FALSE(r);
    CHECK(r.error().file() == dir.file("m.pt"));
  }
  // No data.pkl: not a torch.save file.
  auto plain_zip = open(zip_stored({{"a/readme.txt", text("hello")}}));
  REQUIRE_FALSE(plain_zip);
  CHECK_THAT(plain_zip.error().to_string(), Catch::Contains("without <archive>/data.pkl"));
  // A strided view reaching past its storage: element (1, 2) of strides (5, 2) from element 1
  // is element 10 of a storage of 6.
  PickleBytes far;
  far.begin_dict().tensor("wt", "FloatStorage", "0", 6, 1, {2, 3}, {5, 2}).end_dict();
  auto past = open(zip_stored({{"a/data.pkl", far.bytes}, {"a/data/0", std::vector<std::byte>(24)}}));
  REQUIRE_FALSE(past);
  CHECK(past.error().code() == Errc::kCorrupt);
  CHECK(past.error().tensor() == std::optional<std::string_view>("wt"));
  // A negative stride (torch has none).
  PickleBytes negative;
  negative.begin_dict().tensor("wt", "FloatStorage", "0", 6, 5, {3}, {-1}).end_dict();
  auto backwards = open(zip_stored({{"a/data.pkl", negative.bytes}, {"a/data/0", std::vector<std::byte>(24)}}));
  REQUIRE_FALSE(backwards);
  CHECK_THAT(backwards.error().message(), Catch::Contains("negative stride"));
}

TEST_CASE("torch: a non-contiguous view is cataloged over the bytes it spans, with its strides", "[formats][torch]") {
  PickleBytes p;
  p.begin_dict()
      .tensor("wt", "FloatStorage", "0", 12, 0, {4, 3}, {1, 4})       // a [3, 4] transposed
      .tensor("stepped", "FloatStorage", "0", 12, 1, {2, 2}, {8, 2})  // rows 0, 2 and columns 1, 3 of it
      .tensor("unit", "FloatStorage", "0", 12, 4, {1, 4}, {99, 1})    // row-major: a dim of 1 has any stride
      .end_dict();
  ScratchDir dir;
  write_file(dir.file("m.pt"), zip_stored({{"m/data.pkl", p.bytes}, {"m/data/0", std::vector<std::byte>(48)}}));
  const auto catalog = formats::open_catalog(dir.file("m.pt"));
  if (!catalog) FAIL(catalog.error().to_string());
  const formats::TensorEntry* wt = catalog->find("wt");
  const formats::TensorEntry* stepped = catalog->find("stepped");
  const formats::TensorEntry* unit = catalog->find("unit");
  REQUIRE((wt != nullptr && stepped != nullptr && unit != nullptr));
  CHECK(wt->strides == std::vector<std::uint64_t>{1, 4});
  CHECK(wt->nbytes == 48);  // elements 0..11
  CHECK(stepped->strides == std::vector<std::uint64_t>{8, 2});
  CHECK(stepped->offset == wt->offset + 4);
  CHECK(stepped->nbytes == (8 + 2 + 1) * 4);  // elements 1..11
  CHECK(unit->strides.empty());
  CHECK(unit->nbytes == 16);
}

TEST_CASE("torch: a tensor has at most torch's 64 dimensions, named when it has more", "[formats][torch]") {
  ScratchDir dir;
  const auto open = [&](const std::vector<std::int32_t>& size) {
    PickleBytes p;
    p.begin_dict().tensor("deep", "FloatStorage", "0", 1, 0, size, size).end_dict();
    write_file(dir.file("m.pt"), zip_stored({{"a/data.pkl", p.bytes}, {"a/data/0", std::vector<std::byte>(4)}}));
    return formats::open_catalog(dir.file("m.pt"));
  };
  const auto deepest = open(std::vector<std::int32_t>(64, 1));
  if (!deepest) FAIL(deepest.error().to_string());
  CHECK(deepest->find("deep")->shape.rank() == 64);
  const auto deeper = open(std::vector<std::int32_t>(65, 1));
  REQUIRE_FALSE(deeper);
  CHECK(deeper.error().code() == Errc::kCorrupt);
  CHECK(deeper.error().file() == dir.file("m.pt"));
  CHECK(deeper.error().tensor() == std::optional<std::string_view>("deep"));
  CHECK_THAT(deeper.error().message(), Catch::Contains("65 dimensions (torch allows at most 64)"));
}

// Pickles that reuse one big object many times (BINGET costs 2 bytes): each ends in one error
// after work linear in its size, not in gigabytes copied or hours of hashing.
TEST_CASE("torch: pickles reusing a big object are refused in linear time and memory", "[formats][torch]") {
  const auto refused = [](const PickleBytes& p, Errc code, const char* message) {
    const auto r = unpickle(p);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == code);
    CHECK(r.error().file() == "t.pkl");
    CHECK_THAT(r.error().message(), Catch::Contains(message));
    return std::string(r.error().tensor().value_or(""));  // the tensor named, if any
  };
  SECTION("one long size tuple as the sizes and strides of many tensors") {
    PickleBytes p;
    p.op(0x80).op(2).tuple(std::vector<std::int32_t>(formats::kMaxPickleTupleItems, 1)).put(0).op('}').op('(');
    for (int i = 0; i < 2000; ++i)
      p.str("t" + std::to_string(i)).rebuild_with("FloatStorage", "0", 1, 0, [](PickleBytes& q) { q.get(0).get(0); });
    p.end_dict();
    CHECK(refused(p, Errc::kCorrupt, "4096 dimensions (torch allows at most 64)") == "t0");
  }
  SECTION("a tuple longer than any a state dict holds") {
    PickleBytes p;
    p.op(0x80).op(2).tuple(std::vector<std::int32_t>(formats::kMaxPickleTupleItems + 1, 1)).op('.');
    refused(p, Errc::kUnsupported, "a tuple of 4097 items");
  }
  SECTION("a big key set again and again") {
    PickleBytes p;
    p.op(0x80).op(2).op('}').op('(').str(std::string(std::size_t{64} << 10, 'k')).put(0);
    p.rebuild_with("FloatStorage", "0", 1, 0, [](PickleBytes& q) { q.tuple({1}).tuple({1}); }).put(1);
    for (int i = 0; i < 100'000; ++i) p.get(0).get(1);
    p.end_dict();
    refused(p, Errc::kUnsupported, "more copying and hashing than");
  }
  SECTION("a big storage key named by many tensors") {
    PickleBytes p;
    p.op(0x80).op(2).str(std::string(std::size_t{128} << 10, 's')).put(1).op('}').op('(');
    for (int i = 0; i < 1000; ++i) {
      p.str("t" + std::to_string(i)).global("torch._utils", "_rebuild_tensor_v2").op('(');
      p.op('(').str("storage").global("torch", "FloatStorage").get(1).str("cpu").integer(1).op('t').op('Q');
      p.integer(0).tuple({1}).tuple({1}).op(0x89).global("collections", "OrderedDict").op(')').op('R').op('t').op('R');
    }
    p.end_dict();
    refused(p, Errc::kUnsupported, "more copying and hashing than");
  }
  SECTION("a call with more arguments than any rebuilder takes") {
    PickleBytes p;
    p.op(0x80).op(2).global("collections", "OrderedDict").tuple(std::vector<std::int32_t>(9, 0)).op('R').op('.');
    refused(p, Errc::kCorrupt, "REDUCE with 9 arguments");
  }
  SECTION("a global named by megabyte strings") {
    PickleBytes p;
    p.op(0x80).op(2).str(std::string(std::size_t{1} << 20, 'm')).str("n").op(0x93).op('.');
    refused(p, Errc::kUnsupported, "a global named by 1048576 and 1 bytes");
  }
}

TEST_CASE("torch: sizes, offsets and strides from the pickle are checked, never wrapping", "[formats][torch]") {
  ScratchDir dir;
  const auto open = [&](const std::vector<std::int64_t>& size, const std::vector<std::int64_t>& stride,
                        std::int32_t offset = 0, const char* storage = "LongStorage") {
    PickleBytes p;
    p.begin_dict()
        .str("big")
        .rebuild_with(storage, "0", 1, offset, [&](PickleBytes& q) { q.tuple8(size).tuple8(stride); })
        .end_dict();
    write_file(dir.file("m.pt"), zip_stored({{"a/data.pkl", p.bytes}, {"a/data/0", std::vector<std::byte>(8)}}));
    return formats::open_catalog(dir.file("m.pt"));
  };
  const auto refused = [&](const Result<formats::Catalog>& r, Errc code, const char* message) {
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == code);
    CHECK(r.error().file() == dir.file("m.pt"));
    CHECK(r.error().tensor() == std::optional<std::string_view>("big"));
    CHECK_THAT(r.error().message(), Catch::Contains(message));
  };
  // 2^61 I64 elements are 2^64 bytes: once listed as 0 bytes over a one-element storage.
  refused(open({std::int64_t{1} << 30, std::int64_t{1} << 31}, {std::int64_t{1} << 31, 1}), Errc::kOverflow,
          "does not fit in 64 bits");
  refused(open({std::int64_t{1} << 62, 4}, {4, 1}), Errc::kOverflow, "element count");
  refused(open({std::int64_t{1} << 62, 2}, {2, 1}), Errc::kCorrupt, "a tensor of 9223372036854775808 elements");
  // Row-major, one element, from element 2^31 - 1: past the storage.
  refused(open({1}, {1}, 0x7fffffff), Errc::kCorrupt, "run past its storage");
  // A view reaching 2^64 elements.
  refused(open({2, 2}, {std::int64_t{1} << 62, std::int64_t{1} << 62}), Errc::kOverflow, "exceeds 2^64");
  REQUIRE(open({1}, {1}));
}

TEST_CASE("torch: a view whose elements overlap gathers to at most 16x its stored bytes or 1 MiB", "[formats][torch]") {
  ScratchDir dir;
  const auto open = [&](const std::vector<std::int32_t>& size, const std::vector<std::int32_t>& stride,
                        std::int32_t numel) {
    PickleBytes p;
    p.begin_dict().tensor("expanded", "FloatStorage", "0", numel, 0, size, stride).end_dict();
    write_file(dir.file("m.pt"),
               zip_stored({{"a/data.pkl", p.bytes},
                           {"a/data/0", std::vector<std::byte>(static_cast<std::size_t>(numel) * 4)}}));
    return formats::open_catalog(dir.file("m.pt"));
  };
  // One float as [32768, 16384] (the 373-byte file: 2 GB once gathered).
  const auto bomb = open({32768, 16384}, {0, 0}, 1);
  REQUIRE_FALSE(bomb);
  CHECK(bomb.error().code() == Errc::kUnsupported);
  CHECK(bomb.error().file() == dir.file("m.pt"));
  CHECK(bomb.error().tensor() == std::optional<std::string_view>("expanded"));
  CHECK_THAT(bomb.error().message(), Catch::Contains("elements overlap"));
  // A row repeated 16 times is read; 17 times a 64 Ki-float row is not.
  const auto sixteen = open({16, 65536}, {0, 1}, 65536);
  if (!sixteen) FAIL(sixteen.error().to_string());
  CHECK(sixteen->find("expanded")->nbytes == 65536 * 4);
  CHECK(open({17, 65536}, {0, 1}, 65536).error().code() == Errc::kUnsupported);
  // Small expansions (a bias broadcast over a few rows) stay under the 1 MiB floor.
  CHECK(open({1024, 256}, {0, 1}, 256));
}

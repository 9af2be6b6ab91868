// The GGUF header parser and driver: a valid file's metadata and tensors (ggml dims reversed
// into numpy order, absolute offsets), a header read in growing pieces, and every rule of
// llama.cpp's gguf.cpp broken on purpose, each refused with the file, tensor and offset.
#include <catch2/catch.hpp>

#include <filesystem>

#include <fmt/format.h>

#include "formats_test_support.hpp"
#include "gguf_bytes.hpp"
#include "qload/formats/driver.hpp"
#include "qload/formats/gguf.hpp"
#include "qload/formats/quant.hpp"

using namespace qload;
using namespace qload::testing;

namespace {

constexpr std::uint32_t kF32 = 0, kF16 = 1, kQ4_0 = 2, kBF16 = 30;

// A valid file: two key-values, an F16 [2, 3] (ne {3, 2}) and an F32 [5] tensor.
GgufBytes valid() {
  GgufBytes g;
  g.header(2, 2).kv_str("general.architecture", "llama").kv_u32("llama.context_length", 4096);
  g.tensor("a", {3, 2}, kF16, 0).tensor("b", {5}, kF32, 32);
  g.pad_to(32).data(random_bytes(12, 1)).pad_to(32).data(random_bytes(20, 2));
  return g;
}

Result<formats::GgufHeader> parse(const GgufBytes& g) {
  return formats::parse_gguf_bytes(g.bytes, g.bytes.size(), "t.gguf");
}

// The parse fails with `code`, saying `text`.
void refused(const GgufBytes& g, Errc code, const std::string& text) {
  const auto h = parse(g);
  REQUIRE_FALSE(h);
  INFO(h.error().to_string());
  CHECK(h.error().code() == code);
  CHECK_THAT(h.error().to_string(), Catch::Contains(text));
  CHECK(h.error().file() == "t.gguf");
}

}  // namespace

TEST_CASE("gguf: a valid file's metadata, dims, types and offsets", "[formats][gguf]") {
  const auto h = parse(valid());
  REQUIRE(h);
  CHECK(h->version == 3);
  CHECK(h->alignment == 32);
  REQUIRE(h->metadata.size() == 2);
  CHECK(h->metadata[0].key == "general.architecture");
  CHECK(h->metadata[0].value == "llama");
  CHECK(h->metadata[1].type == "u32");
  CHECK(h->metadata[1].value == "4096");
  REQUIRE(h->tensors.size() == 2);
  CHECK(h->tensors[0].ne == std::vector<std::uint64_t>{3, 2});
  CHECK(h->tensors[0].nbytes == 12);
  CHECK(h->tensors[1].offset == 32);
  CHECK(h->data_offset % 32 == 0);

  ScratchDir dir;
  write_file(dir.file("m.gguf"), valid().bytes);
  const auto catalog = formats::open_catalog(dir.path().string());  // a directory with one .gguf
  REQUIRE(catalog);
  CHECK(catalog->format == "gguf");
  const formats::TensorEntry* a = catalog->find("a");
  REQUIRE(a != nullptr);
  CHECK(a->dtype == DType::kF16);
  CHECK(a->shape == Shape{2, 3});  // numpy order: ggml's innermost dim last
  CHECK(a->offset == h->data_offset);
  CHECK(read_file_range(dir.file("m.gguf"), catalog->find("b")->offset, 20) == random_bytes(20, 2));
  CHECK(catalog->files[0].metadata.at("llama.context_length") == "4096");
}

TEST_CASE("gguf: arrays are shown in full up to 16 elements, summarised beyond", "[formats][gguf]") {
  GgufBytes g;
  g.header(0, 3);
  g.str("short").u32(9).u32(4).u64(3).u32(1).u32(2).u32(3);
  g.str("words").u32(9).u32(8).u64(2).str("a").str("b");
  g.str("vocab").u32(9).u32(8).u64(40);
  for (int i = 0; i < 40; ++i) g.str("tok");
  const auto h = parse(g);
  if (!h) FAIL(h.error().to_string());
  CHECK(h->metadata[0].value == "[1, 2, 3]");
  CHECK(h->metadata[0].type == "array[u32]");
  CHECK(h->metadata[1].value == "[\"a\", \"b\"]");
  CHECK(h->metadata[2].value == "[40 x string]");
}

TEST_CASE("gguf: a header larger than the first read is read in more pieces", "[formats][gguf]") {
  GgufBytes g;
  g.header(1, 1).kv_str("tokenizer.chat_template", std::string(3 << 20, 'x'));  // 3 MiB
  g.tensor("w", {4}, kF32, 0).pad_to(32).data(random_bytes(16, 3));
  std::uint64_t wanted = 0;
  const auto partial = formats::parse_gguf_bytes(std::span(g.bytes).first(1 << 20), g.bytes.size(), "t.gguf", &wanted);
  REQUIRE_FALSE(partial);
  CHECK(wanted > (1u << 20));
  ScratchDir dir;
  write_file(dir.file("big.gguf"), g.bytes);
  const auto h = formats::read_gguf_header(dir.file("big.gguf"));
  REQUIRE(h);
  CHECK(h->tensors.at(0).name == "w");
}

// Issue 45 finding 10: GGUF keeps the header caps safetensors keeps (header_limits.hpp), where it
// once checked counts only against the file size: 12 M zero-size tensors in a large enough
// file took 39 s and 4.7 GB. Each cap is refused from a small prefix of a file said to be large,
// before the parser stores anything or asks for more bytes.
TEST_CASE("gguf: headers are held to the safetensors caps on bytes, entries and array lengths", "[formats][gguf]") {
  constexpr std::uint64_t kHugeFile = std::uint64_t{1} << 40;  // the counts fit the file's bytes
  const auto capped = [&](const GgufBytes& g, const std::string& text) {
    std::uint64_t wanted = 0;
    const auto h = formats::parse_gguf_bytes(g.bytes, kHugeFile, "t.gguf", &wanted);
    REQUIRE_FALSE(h);
    INFO(h.error().to_string());
    CHECK(h.error().code() == Errc::kUnsupported);
    CHECK_THAT(h.error().to_string(), Catch::Contains(text));
    CHECK(h.error().file() == "t.gguf");
    CHECK(wanted <= formats::kMaxHeaderBytes);  // never asks to read past the cap
  };
  GgufBytes tensors;
  tensors.header(12'000'000, 0);
  capped(tensors, "12000000 tensors and 0 key-values (qload reads at most 10000000 entries");
  GgufBytes both;  // the sum counts: 5 M + 5 M + 1
  both.header(5'000'000, 5'000'001);
  capped(both, "at most 10000000 entries");
  GgufBytes kvs;
  kvs.header(0, formats::kMaxHeaderEntries + 1);
  capped(kvs, "entries in all");
  GgufBytes string;  // a 150 MB value
  string.header(0, 1).str("k").u32(8).u64(150'000'000).data(zeros(64));
  capped(string, "past 100000000 bytes");
  GgufBytes array;  // 10 M + 1 u8 elements: 10 MB, but more elements than any header may have
  array.header(0, 1).str("k").u32(9).u32(0).u64(formats::kMaxHeaderEntries + 1);
  capped(array, "an array of 10000001 elements");
  // The same through a file: a sparse file with a 101 MB string is refused, not read whole.
  ScratchDir dir;
  GgufBytes file;
  file.header(0, 1).str("k").u32(8).u64(101'000'000).data(zeros(64));
  write_file(dir.file("big.gguf"), file.bytes);
  std::filesystem::resize_file(dir.file("big.gguf"), 128'000'000);
  const auto big = formats::read_gguf_header(dir.file("big.gguf"));
  REQUIRE_FALSE(big);
  CHECK(big.error().code() == Errc::kUnsupported);
  CHECK_THAT(big.error().to_string(), Catch::Contains("qload's limit for headers"));
  // A header just under the caps still parses: 1,000 tensors and a 1 MB string.
  GgufBytes ok;
  ok.header(1000, 1).kv_str("k", std::string(1 << 20, 'x'));
  for (int i = 0; i < 1000; ++i) ok.tensor(fmt::format("t{}", i), {0}, kF32, 0);
  ok.pad_to(32);
  CHECK(formats::parse_gguf_bytes(ok.bytes, ok.bytes.size(), "t.gguf"));
}

TEST_CASE("gguf: every broken rule is refused, naming the file, tensor and offset", "[formats][gguf]") {
  SECTION("not GGUF, or a version qload does not read") {
    GgufBytes g = valid();
    g.bytes[0] = std::byte{'X'};
    refused(g, Errc::kCorrupt, "not a GGUF file");
    GgufBytes v1;
    v1.header(0, 0, 1);
    refused(v1, Errc::kUnsupported, "version 1");
    GgufBytes v4;
    v4.header(0, 0, 4);
    refused(v4, Errc::kUnsupported, "GGUF version 4");
  }
  SECTION("counts the file cannot hold") {
    GgufBytes g;
    g.header(0, std::uint64_t{1} << 60);
    refused(g, Errc::kCorrupt, "key-values cannot fit");
    GgufBytes t;
    t.header(std::uint64_t{1} << 60, 0);
    refused(t, Errc::kCorrupt, "tensors cannot fit");
  }
  SECTION("a string longer than the file") {
    GgufBytes g;
    g.header(0, 1).u64(std::uint64_t{1} << 62).data(zeros(16));
    refused(g, Errc::kTruncated, "the file has");
  }
  SECTION("arrays of arrays, huge arrays, unknown value types, bad bools") {
    GgufBytes nested;
    nested.header(0, 1).str("k").u32(9).u32(9).u64(1);
    refused(nested, Errc::kCorrupt, "arrays of arrays");
    GgufBytes huge;
    huge.header(0, 1).str("k").u32(9).u32(10).u64(std::uint64_t{1} << 61);
    refused(huge, Errc::kCorrupt, "elements cannot fit");
    GgufBytes unknown;
    unknown.header(0, 1).str("k").u32(13);
    refused(unknown, Errc::kCorrupt, "unknown value type 13");
    GgufBytes boolean;
    boolean.header(0, 1).str("k").u32(7).raw("\x02", 1);
    refused(boolean, Errc::kCorrupt, "a bool of value 2");
  }
  SECTION("duplicate keys and tensor names") {
    GgufBytes keys;
    keys.header(0, 2).kv_u32("k", 1).kv_u32("k", 2);
    refused(keys, Errc::kCorrupt, "duplicate key 'k'");
    GgufBytes names;
    names.header(2, 0).tensor("w", {4}, kF32, 0).tensor("w", {4}, kF32, 32).pad_to(32).data(zeros(64));
    refused(names, Errc::kCorrupt, "duplicate tensor name");
  }
  SECTION("an alignment that is not a u32 power of two") {
    GgufBytes g;
    g.header(0, 1).kv_u32("general.alignment", 24);
    refused(g, Errc::kCorrupt, "general.alignment must be a u32 power of two");
    GgufBytes s;
    s.header(0, 1).kv_str("general.alignment", "32");
    refused(s, Errc::kCorrupt, "general.alignment must be a u32 power of two");
  }
  SECTION("dims: more than 4, an element count that overflows") {
    GgufBytes g;
    g.header(1, 0).tensor("w", {1, 1, 1, 1, 1}, kF32, 0);
    refused(g, Errc::kCorrupt, "5 dimensions");
    GgufBytes o;
    o.header(1, 0).tensor("w", {std::uint64_t{1} << 40, std::uint64_t{1} << 40}, kF32, 0);
    refused(o, Errc::kOverflow, "overflows");
  }
  SECTION("an unknown type, rows that are not whole blocks") {
    GgufBytes g;
    g.header(1, 0).tensor("w", {4}, 4, 0);  // 4: Q4_2, removed from ggml
    refused(g, Errc::kCorrupt, "unknown ggml type 4");
    GgufBytes b;
    b.header(1, 0).tensor("w", {48, 2}, kQ4_0, 0);
    refused(b, Errc::kCorrupt, "rows of 48 elements are not whole Q4_0 blocks of 32");
  }
  SECTION("tensors out of order, overlapping, or past the end of the file") {
    GgufBytes gap;
    gap.header(2, 0).tensor("a", {4}, kF32, 0).tensor("b", {4}, kF32, 64).pad_to(32).data(zeros(96));
    refused(gap, Errc::kCorrupt, "data offset 64 where the tensors before end at 32");
    GgufBytes overlap;
    overlap.header(2, 0).tensor("a", {16}, kF32, 0).tensor("b", {4}, kF32, 32).pad_to(32).data(zeros(96));
    refused(overlap, Errc::kCorrupt, "data offset 32 where the tensors before end at 64");
    GgufBytes past;
    past.header(1, 0).tensor("w", {1024}, kBF16, 0).pad_to(32).data(zeros(100));
    refused(past, Errc::kTruncated, "run past the end of the file");
    const auto h = parse(past);
    REQUIRE_FALSE(h);
    CHECK(h.error().tensor() == "w");
    CHECK(h.error().offset().has_value());
  }
  SECTION("every truncation of a valid file") {
    const GgufBytes g = valid();
    for (std::size_t n = 0; n + 1 < g.bytes.size(); ++n) {
      INFO("first " << n << " bytes");
      const auto h = formats::parse_gguf_bytes(std::span(g.bytes).first(n), n, "t.gguf");
      REQUIRE_FALSE(h);
      // Short reads, or counts that the bytes left cannot hold.
      CHECK((h.error().code() == Errc::kTruncated || h.error().code() == Errc::kCorrupt));
    }
  }
}

TEST_CASE("gguf: a block-quantized tensor is its raw blocks and a quantized weight of its type", "[formats][gguf]") {
  GgufBytes g;
  g.header(2, 0)
      .tensor("blk.0.ffn_up_exps.weight", {64, 2, 3}, kQ4_0, 0)
      .tensor("norm", {4}, kF32, 224);  // 216 bytes of blocks, padded to 32
  g.pad_to(32).data(random_bytes(6 * 36, 3)).pad_to(32).data(random_bytes(16, 4));
  ScratchDir dir;
  write_file(dir.file("q.gguf"), g.bytes);
  const auto catalog = formats::open_catalog(dir.file("q.gguf"));
  REQUIRE(catalog);
  const formats::TensorEntry& blocks = catalog->tensors[0];
  CHECK(blocks.dtype == DType::kU8);
  CHECK(blocks.shape == Shape{3, 2, 36});  // numpy order, the last dim in bytes: 2 blocks of 18
  CHECK(blocks.ggml_type == std::optional<std::uint32_t>(kQ4_0));
  CHECK_FALSE(catalog->tensors[1].ggml_type);

  const auto quant = formats::detect_quantization(*catalog);
  REQUIRE(quant);
  CHECK(quant->method == "gguf");
  REQUIRE(quant->logical.size() == 1);
  const formats::LogicalTensor& w = quant->logical[0];
  CHECK(w.name == "blk.0.ffn_up_exps.weight");
  CHECK(w.params.scheme == formats::QuantScheme::kGgml);
  CHECK(formats::weight_scheme_name(w.params) == "ggml-Q4_0");
  CHECK(w.params.bits == 4);
  CHECK((w.rows == 6 && w.cols == 64));
  CHECK(w.dequantized_shape() == Shape{3, 2, 64});
  CHECK(w.part("blocks") == std::optional<std::uint32_t>(0));
  CHECK(quant->plain == std::vector<std::uint32_t>{1});
  const formats::QuantLayoutText layout = formats::describe_layout(w, *catalog);
  CHECK(layout.scales == "per-block 32, in the Q4_0 blocks");
  CHECK(layout.scale_dtype == "F16");
}

namespace {

// Split `index` (1-based) of `count`, as gguf-split writes them: split.no (0-based, u16),
// split.count (u16), and in the first the total tensor count (i32); one F32 [4] tensor each.
GgufBytes split(unsigned index, unsigned count, std::string_view tensor, unsigned no_key) {
  GgufBytes g;
  const std::uint16_t no = static_cast<std::uint16_t>(no_key), n = static_cast<std::uint16_t>(count);
  const bool first = index == 1;
  g.header(1, first ? 4 : 2);
  if (first) g.kv_str("general.architecture", "llama");
  g.str("split.no").u32(2).raw(&no, 2);
  g.str("split.count").u32(2).raw(&n, 2);
  if (first) g.kv_u32("split.tensors.count", count);
  g.tensor(tensor, {4}, kF32, 0).pad_to(32).data(random_bytes(16, index));
  return g;
}

}  // namespace

TEST_CASE("gguf: a split GGUF opens from any of its files or its directory, and must be whole", "[formats][gguf]") {
  ScratchDir dir;
  const auto path = [&](unsigned i) { return dir.file(fmt::format("m-{:05}-of-00003.gguf", i)); };
  for (unsigned i = 1; i <= 3; ++i) write_file(path(i), split(i, 3, fmt::format("t{}", i), i - 1).bytes);
  for (const std::string& source : {dir.path().string(), path(2)}) {
    INFO(source);
    const auto catalog = formats::open_catalog(source);
    if (!catalog) FAIL(catalog.error().to_string());
    REQUIRE(catalog->files.size() == 3);
    REQUIRE(catalog->tensors.size() == 3);
    for (unsigned i = 1; i <= 3; ++i) {
      const formats::TensorEntry* t = catalog->find(fmt::format("t{}", i));
      REQUIRE(t != nullptr);
      CHECK(t->file == i - 1);
      CHECK(read_file_range(path(i), t->offset, 16) == random_bytes(16, i));
    }
    CHECK(catalog->files[0].metadata.at("general.architecture") == "llama");
  }
  SECTION("a split whose split.no disagrees with its name") {
    write_file(path(2), split(2, 3, "t2", 5).bytes);
    const auto catalog = formats::open_catalog(path(1));
    REQUIRE_FALSE(catalog);
    CHECK(catalog.error().file() == path(2));
    CHECK_THAT(catalog.error().to_string(), Catch::Contains("split.no is 5 but the file is named as split 2 of 3"));
  }
  SECTION("a tensor in two splits") {
    write_file(path(3), split(3, 3, "t1", 2).bytes);
    const auto catalog = formats::open_catalog(path(1));
    REQUIRE_FALSE(catalog);
    CHECK(catalog.error().tensor() == "t1");
    CHECK_THAT(catalog.error().to_string(), Catch::Contains("in two files"));
  }
  SECTION("a missing split") {
    std::filesystem::remove(path(3));
    const auto catalog = formats::open_catalog(path(1));
    REQUIRE_FALSE(catalog);
    CHECK(catalog.error().code() == Errc::kNotFound);
    CHECK(catalog.error().file() == path(3));
    CHECK_FALSE(formats::find_driver("gguf")->recognizes(dir.path().string()));  // two of three
  }
}

TEST_CASE("gguf: a split part or a directory's one file that links out of the directory is refused",
          "[formats][gguf][security]") {
  ScratchDir dir, outside;
  const auto path = [&](unsigned i) { return dir.file(fmt::format("m-{:05}-of-00002.gguf", i)); };
  SECTION("a split part") {
    write_file(path(1), split(1, 2, "t1", 0).bytes);
    write_file(outside.file("secret.gguf"), split(2, 2, "t2", 1).bytes);
    std::filesystem::create_symlink(outside.file("secret.gguf"), path(2));
    for (const std::string& source : {dir.path().string(), path(1)}) {
      INFO(source);
      const auto catalog = formats::open_catalog(source);
      REQUIRE_FALSE(catalog);
      CHECK(catalog.error().code() == Errc::kCorrupt);
      CHECK(catalog.error().file() == path(2));
      CHECK_THAT(catalog.error().to_string(), Catch::Contains("outside the model directory"));
    }
  }
  SECTION("the one .gguf of a directory") {
    write_file(outside.file("secret.gguf"), valid().bytes);
    std::filesystem::create_symlink(outside.file("secret.gguf"), dir.file("model.gguf"));
    const auto catalog = formats::open_catalog(dir.path().string());
    REQUIRE_FALSE(catalog);
    CHECK(catalog.error().code() == Errc::kCorrupt);
    CHECK(catalog.error().file() == dir.file("model.gguf"));
    // Named by the user, the link is read as named (the user chose that file).
    CHECK(formats::open_catalog(dir.file("model.gguf")));
  }
}

TEST_CASE("gguf: a Hugging Face cache snapshot's links into its blobs are accepted", "[formats][gguf][security]") {
  ScratchDir cache;
  const std::filesystem::path repo = cache.path() / "models--org--tiny-gguf";
  const std::filesystem::path snapshot = repo / "snapshots" / "abc123";
  std::filesystem::create_directories(repo / "blobs");
  std::filesystem::create_directories(snapshot);
  for (unsigned i = 1; i <= 2; ++i) {
    write_file((repo / "blobs" / fmt::format("h{}", i)).string(), split(i, 2, fmt::format("t{}", i), i - 1).bytes);
    std::filesystem::create_symlink(fmt::format("../../blobs/h{}", i),
                                    snapshot / fmt::format("m-{:05}-of-00002.gguf", i));
  }
  for (const std::string& source : {snapshot.string(), (snapshot / "m-00001-of-00002.gguf").string()}) {
    INFO(source);
    const auto catalog = formats::open_catalog(source);
    if (!catalog) FAIL(catalog.error().to_string());
    CHECK(catalog->tensors.size() == 2);
    REQUIRE(catalog->files.size() == 2);
    CHECK(catalog->files[1].identity.has_value());
  }
}

// Directory sources without an index, config.json, and sources that are not files at all.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <filesystem>

#include "formats_test_support.hpp"

using namespace qload;
using namespace qload::testing;
namespace fs = std::filesystem;

TEST_CASE("a single file source is read on its own, without config.json", "[formats][directory]") {
  ScratchDir dir;
  write_shard(dir.file("weights.safetensors"), {{"w", DType::kF16, Shape{2, 2}}});
  write_text(dir.file("config.json"), "not even JSON");  // not read for a single-file source
  const auto catalog = safetensors().open(dir.file("weights.safetensors"));
  REQUIRE(catalog);
  REQUIRE(catalog->files.size() == 1);
  CHECK(catalog->files[0].path == dir.file("weights.safetensors"));
  CHECK(catalog->files[0].size == fs::file_size(dir.file("weights.safetensors")));
  CHECK(catalog->tensors.size() == 1);
  CHECK(catalog->config_json.empty());
}

TEST_CASE("a directory prefers model.safetensors, else its only file, else all in name order", "[formats][directory]") {
  ScratchDir dir;
  write_shard(dir.file("b.safetensors"), {{"b1", DType::kU8, Shape{1}}});
  write_shard(dir.file("a.safetensors"), {{"a1", DType::kU8, Shape{1}}, {"a2", DType::kU8, Shape{3}}});
  write_text(dir.file(".hidden.safetensors"), "ignored: hidden files are never part of a checkpoint");
  write_text(dir.file("notes.txt"), "ignored");
  SECTION("all files, in name order") {
    const auto catalog = safetensors().open(dir.path().string());
    REQUIRE(catalog);
    REQUIRE(catalog->files.size() == 2);
    CHECK(catalog->files[0].path == dir.file("a.safetensors"));
    CHECK(catalog->files[1].path == dir.file("b.safetensors"));
    REQUIRE(catalog->tensors.size() == 3);
    CHECK(catalog->tensors[2].name == "b1");
    CHECK(catalog->tensors[2].file == 1);
  }
  SECTION("model.safetensors alone when present") {
    write_shard(dir.file("model.safetensors"), {{"m", DType::kU8, Shape{2}}});
    const auto catalog = safetensors().open(dir.path().string());
    REQUIRE(catalog);
    REQUIRE(catalog->files.size() == 1);
    CHECK(catalog->files[0].path == dir.file("model.safetensors"));
  }
  SECTION("duplicate names across files are rejected") {
    write_shard(dir.file("c.safetensors"), {{"a2", DType::kU8, Shape{3}}});
    check_error(safetensors().open(dir.path().string()),
                {Errc::kCorrupt, "tensor name is in two files", dir.file("c.safetensors"), "a2", std::nullopt});
  }
  SECTION("one bad file fails the whole directory, naming it") {
    write_text(dir.file("c.safetensors"), "garbage!garbage!");
    check_error(safetensors().open(dir.path().string()),
                {Errc::kCorrupt, "exceeds the limit", dir.file("c.safetensors"), "", 0});
  }
}

TEST_CASE("config.json is kept, with its quantization_config", "[formats][directory]") {
  ScratchDir dir;
  write_shard(dir.file("model.safetensors"), {{"w", DType::kU8, Shape{1}}});
  const std::string config = dir.file("config.json");
  SECTION("absent") {
    const auto catalog = safetensors().open(dir.path().string());
    REQUIRE(catalog);
    CHECK(catalog->config_json.empty());
    CHECK(catalog->quantization_config.empty());
  }
  SECTION("without quantization_config, or with a null one") {
    for (const std::string& text :
         std::initializer_list<std::string>{R"({"hidden_size": 8})", R"({"quantization_config": null})"}) {
      write_text(config, text);
      const auto catalog = safetensors().open(dir.path().string());
      REQUIRE(catalog);
      CHECK(catalog->config_json == text);
      CHECK(catalog->quantization_config.empty());
    }
  }
  SECTION("malformed") {
    const auto rejects = [&](const std::string& text, Errc code, const std::string& message) {
      INFO("config: " << text.substr(0, 80));
      write_text(config, text);
      check_error(safetensors().open(dir.path().string()), {code, message, config, "", std::nullopt});
    };
    rejects("[]", Errc::kCorrupt, "not a JSON object");
    rejects(R"({"a": 1, "a": 2})", Errc::kCorrupt, "duplicate key 'a'");
    rejects(R"({"quantization_config": [1]})", Errc::kCorrupt, "quantization_config is not an object");
    rejects(R"({"quantization_config": {"bits": 4,}})", Errc::kCorrupt, "invalid JSON");
    rejects(std::string(16u << 20, ' ') + "{}", Errc::kUnsupported, "qload reads at most 16777216 bytes");
  }
}

TEST_CASE("sources that are not checkpoints are rejected without hanging", "[formats][directory]") {
  ScratchDir dir;
  SECTION("an empty directory") {
    check_error(
        safetensors().open(dir.path().string()),
        {Errc::kNotFound, "no *.safetensors or *.safetensors.index.json files", dir.path().string(), "", std::nullopt});
  }
  SECTION("a missing path") {
    check_error(safetensors().open(dir.file("nope")), {Errc::kNotFound, "stat", dir.file("nope"), "", std::nullopt});
  }
  SECTION("a FIFO named like a shard (opening it must not block)") {
    REQUIRE(::mkfifo(dir.file("model.safetensors").c_str(), 0600) == 0);
    check_error(safetensors().open(dir.path().string()),
                {Errc::kInvalidArgument, "not a regular file", dir.file("model.safetensors"), "", std::nullopt});
    check_error(
        safetensors().open(dir.file("model.safetensors")),
        {Errc::kInvalidArgument, "not a regular file or a directory", dir.file("model.safetensors"), "", std::nullopt});
  }
  SECTION("a directory named like a shard") {
    fs::create_directory(dir.file("x.safetensors"));
    check_error(safetensors().open(dir.path().string()),
                {Errc::kInvalidArgument, "not a regular file", dir.file("x.safetensors"), "", std::nullopt});
  }
}

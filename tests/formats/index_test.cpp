// Sharded checkpoints: `*.safetensors.index.json` and its shards must agree, and no shard name
// may reach outside the model directory (security.md test 43).
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <optional>

#include "formats_test_support.hpp"
#include "path_guard.hpp"
#include "qload/formats/safetensors_index.hpp"
#include "support/fifo.hpp"

using namespace qload;
using namespace qload::testing;
namespace fs = std::filesystem;

namespace {

constexpr const char* kShard1 = "model-00001-of-00002.safetensors";
constexpr const char* kShard2 = "model-00002-of-00002.safetensors";

// Two shards: a (U8 [4]) and b (F32 [2]) in shard 1, c (I16 [3]) in shard 2.
void write_two_shards(const fs::path& dir) {
  write_shard((dir / kShard1).string(), {{"a", DType::kU8, Shape{4}}, {"b", DType::kF32, Shape{2}}});
  write_shard((dir / kShard2).string(), {{"c", DType::kI16, Shape{3}}});
}

std::string index_json(const std::string& weight_map, const std::string& metadata = R"({"total_size": 18})") {
  return "{\n  \"metadata\": " + metadata + ",\n  \"weight_map\": {" + weight_map + "}\n}\n";
}

std::string good_map() {
  return std::string(R"("a": ")") + kShard1 + R"(", "b": ")" + kShard1 + R"(", "c": ")" + kShard2 + "\"";
}

std::string index_path(const ScratchDir& dir) {
  return dir.file("model.safetensors.index.json");
}

}  // namespace

TEST_CASE("a sharded directory becomes one catalog, in shard then offset order", "[formats][index]") {
  ScratchDir dir;
  write_two_shards(dir.path());
  write_text(index_path(dir), index_json(good_map()));
  write_text(dir.file("config.json"),
             R"({"model_type": "llama", "quantization_config": {"quant_method": "gptq", "bits": 4}})");
  const auto catalog = safetensors().open(dir.path().string());
  REQUIRE(catalog);
  CHECK(catalog->format == "safetensors");
  CHECK(catalog->source == dir.path().string());
  REQUIRE(catalog->files.size() == 2);
  CHECK(catalog->files[0].path == dir.file(kShard1));
  CHECK(catalog->files[1].path == dir.file(kShard2));
  REQUIRE(catalog->tensors.size() == 3);
  CHECK(catalog->tensors[0].name == "a");
  CHECK(catalog->tensors[1].name == "b");
  CHECK(catalog->tensors[2].name == "c");
  CHECK(catalog->tensors[2].file == 1);
  CHECK(catalog->tensors[2].offset == catalog->files[1].data_offset);
  REQUIRE(catalog->find("b") != nullptr);
  CHECK(catalog->find("b")->nbytes == 8);
  CHECK(catalog->find("zz") == nullptr);
  CHECK(catalog->total_tensor_bytes() == 18);
  CHECK_THAT(catalog->config_json, Catch::Contains("\"model_type\": \"llama\""));
  CHECK(catalog->quantization_config == R"({"bits":4,"quant_method":"gptq"})");
  // The index can also be named directly (to choose between several).
  const auto direct = safetensors().open(index_path(dir));
  REQUIRE(direct);
  CHECK(direct->tensors.size() == 3);
  CHECK(direct->source == index_path(dir));
}

TEST_CASE("shard names that leave the model directory are rejected", "[formats][index][security]") {
  ScratchDir outside;
  write_shard(outside.file("evil.safetensors"), {{"a", DType::kU8, Shape{4}}});
  ScratchDir dir;
  write_two_shards(dir.path());
  const std::string escape = fs::relative(outside.file("evil.safetensors"), dir.path()).string();
  for (const auto& [shard, why] :
       {std::pair<std::string, std::string>{outside.file("evil.safetensors"), "is an absolute path"},
        {"/etc/passwd", "is an absolute path"},
        {"../x.safetensors", "has a '..' component"},
        {escape, "has a '..' component"},
        {"sub/../../x.safetensors", "has a '..' component"},
        {"a\\\\..\\\\b.safetensors", "contains a backslash"},
        {"x\\u0000.safetensors", "contains a NUL byte"},
        {"", "is empty"}}) {
    INFO("shard: " << shard);
    write_text(index_path(dir), index_json(R"("a": ")" + shard + "\"", "{}"));
    check_error(safetensors().open(dir.path().string()), {Errc::kCorrupt, why, index_path(dir), "a", std::nullopt});
  }
}

TEST_CASE("a shard that is a symlink out of the model directory is rejected", "[formats][index][security]") {
  ScratchDir outside;
  write_shard(outside.file("evil.safetensors"), {{"a", DType::kU8, Shape{4}}});
  ScratchDir dir;
  fs::create_symlink(outside.file("evil.safetensors"), dir.file("model-00001-of-00001.safetensors"));
  write_text(index_path(dir), index_json(R"("a": "model-00001-of-00001.safetensors")", "{}"));
  check_error(safetensors().open(dir.path().string()),
              {Errc::kCorrupt, "outside the model directory", dir.file("model-00001-of-00001.safetensors"),
               std::nullopt, std::nullopt});
  // A directory symlink on the way counts too.
  fs::remove(dir.file("model-00001-of-00001.safetensors"));
  fs::create_directory_symlink(outside.path(), dir.file("sub"));
  write_text(index_path(dir), index_json(R"("a": "sub/evil.safetensors")", "{}"));
  check_error(safetensors().open(dir.path().string()), {Errc::kCorrupt, "outside the model directory",
                                                        dir.file("sub/evil.safetensors"), std::nullopt, std::nullopt});
  // And so does a plain directory source whose only file is such a symlink.
  fs::remove(index_path(dir));
  fs::create_symlink(outside.file("evil.safetensors"), dir.file("model.safetensors"));
  check_error(safetensors().open(dir.path().string()), {Errc::kCorrupt, "outside the model directory",
                                                        dir.file("model.safetensors"), std::nullopt, std::nullopt});
}

TEST_CASE("symlinks that stay inside, and Hugging Face cache snapshots, are accepted", "[formats][index][security]") {
  ScratchDir cache;
  // <repo>/snapshots/<rev>/<file> -> ../../blobs/<hash>: how huggingface_hub stores models.
  const fs::path repo = cache.path() / "models--org--tiny";
  fs::create_directories(repo / "blobs");
  fs::create_directories(repo / "snapshots" / "abc123");
  write_shard((repo / "blobs" / "1111").string(), {{"a", DType::kU8, Shape{4}}, {"b", DType::kF32, Shape{2}}});
  write_shard((repo / "blobs" / "2222").string(), {{"c", DType::kI16, Shape{3}}});
  write_text((repo / "blobs" / "3333").string(), index_json(good_map()));
  const fs::path snapshot = repo / "snapshots" / "abc123";
  fs::create_symlink("../../blobs/1111", snapshot / kShard1);
  fs::create_symlink("../../blobs/2222", snapshot / kShard2);
  fs::create_symlink("../../blobs/3333", snapshot / "model.safetensors.index.json");
  const auto catalog = safetensors().open(snapshot.string());
  REQUIRE(catalog);
  CHECK(catalog->tensors.size() == 3);
  CHECK(catalog->files[0].path == (snapshot / kShard1).string());
  // A snapshot's blobs are the only outside place allowed: a sibling directory is not.
  fs::create_directories(repo / "other");
  fs::rename(repo / "blobs" / "2222", repo / "other" / "2222");
  fs::remove(snapshot / kShard2);
  fs::create_symlink("../../other/2222", snapshot / kShard2);
  check_error(safetensors().open(snapshot.string()), {Errc::kCorrupt, "outside the model directory",
                                                      (snapshot / kShard2).string(), std::nullopt, std::nullopt});
}

TEST_CASE("the descriptor opened is checked, not the path alone: a link swapped in after the path check is refused",
          "[formats][index][security]") {
  ScratchDir dir, outside;
  write_two_shards(dir.path());
  const auto root = formats::model_root(dir.path());
  REQUIRE(root);
  const auto path = formats::resolve_inside(*root, kShard1);
  REQUIRE(path);
  // Between the path check and the open, a symlink out of the directory is renamed over the shard.
  write_shard(outside.file("secret"), {{"a", DType::kU8, Shape{4}}, {"b", DType::kF32, Shape{2}}});
  fs::create_symlink(outside.file("secret"), dir.path() / "swap");
  fs::rename(dir.path() / "swap", *path);
  const auto opened = formats::open_inside(*root, *path);
  REQUIRE_FALSE(opened);
  CHECK(opened.error().code() == Errc::kCorrupt);
  CHECK(opened.error().file() == *path);
  CHECK_THAT(opened.error().to_string(), Catch::Contains("outside the model directory"));
  // A FIFO swapped in instead: refused without blocking.
  plant_fifo(*path);
  std::optional<Result<formats::OpenedFile>> fifo;
  REQUIRE(returns_within([&] { fifo.emplace(formats::open_inside(*root, *path)); }, *path));
  REQUIRE_FALSE(*fifo);
  CHECK(fifo->error().code() == Errc::kInvalidArgument);
  // The file the catalog reads is the inode whose identity it records.
  const auto catalog = safetensors().open(dir.path().string());
  REQUIRE_FALSE(catalog);  // the index's shard 1 is a FIFO now
  fs::remove(*path);
  write_shard(*path, {{"a", DType::kU8, Shape{4}}, {"b", DType::kF32, Shape{2}}});
  write_text(index_path(dir), index_json(good_map()));
  const auto good = safetensors().open(dir.path().string());
  REQUIRE(good);
  for (const formats::CatalogFile& f : good->files) {
    REQUIRE(f.identity.has_value());
    struct stat st {};
    REQUIRE(::stat(f.path.c_str(), &st) == 0);
    CHECK(f.identity->ino == st.st_ino);
    CHECK(f.identity->size == f.size);
  }
}

TEST_CASE("index and shards must agree", "[formats][index]") {
  ScratchDir dir;
  write_two_shards(dir.path());
  const std::string index = index_path(dir);
  SECTION("a missing shard") {
    write_text(index, index_json(good_map() + R"(, "d": "model-00003-of-00003.safetensors")", "{}"));
    check_error(safetensors().open(dir.path().string()),
                {Errc::kNotFound, "open", dir.file("model-00003-of-00003.safetensors"), std::nullopt, std::nullopt});
  }
  SECTION("an indexed tensor its shard does not hold") {
    write_text(index, index_json(good_map() + R"(, "d": ")" + kShard2 + "\"", "{}"));
    check_error(safetensors().open(dir.path().string()),
                {Errc::kCorrupt, "maps this tensor to shard 'model-00002-of-00002.safetensors', which does not hold it",
                 dir.file(kShard2), "d", std::nullopt});
  }
  SECTION("a tensor in two shards") {
    write_shard(dir.file(kShard2), {{"c", DType::kI16, Shape{3}}, {"a", DType::kU8, Shape{4}}});
    write_text(index, index_json(good_map(), "{}"));
    check_error(safetensors().open(dir.path().string()),
                {Errc::kCorrupt, "tensor name is in two files", dir.file(kShard2), "a", std::nullopt});
  }
  SECTION("a shard tensor missing from the weight_map") {
    write_text(index, index_json(R"("a": ")" + std::string(kShard1) + R"(", "c": ")" + kShard2 + "\"", "{}"));
    const auto result = safetensors().open(dir.path().string());
    check_error(result,
                {Errc::kCorrupt, "is in shard 'model-00001-of-00002.safetensors' but not in the index's weight_map",
                 dir.file(kShard1), "b", std::nullopt});
    CHECK(result.error().offset().has_value());
  }
  SECTION("a tensor mapped to the wrong shard") {
    write_text(index, index_json(R"("a": ")" + std::string(kShard1) + R"(", "b": ")" + kShard2 + R"(", "c": ")" +
                                     kShard2 + "\"",
                                 "{}"));
    check_error(safetensors().open(dir.path().string()),
                {Errc::kCorrupt, "but the index maps it to 'model-00002-of-00002.safetensors'", dir.file(kShard1), "b",
                 std::nullopt});
  }
  SECTION("total_size that differs from the tensors' bytes") {
    write_text(index, index_json(good_map(), R"({"total_size": 20})"));
    check_error(safetensors().open(dir.path().string()),
                {Errc::kCorrupt, "total_size is 20 but the shards' tensors hold 18 bytes", index, "", std::nullopt});
  }
  SECTION("total_size absent, or written as an integral float, is fine") {
    for (const std::string& metadata :
         std::initializer_list<std::string>{"{}", R"({"total_size": 18.0})", R"({"format": "pt"})", "null"}) {
      write_text(index, index_json(good_map(), metadata));
      CHECK(safetensors().open(dir.path().string()));
    }
  }
}

TEST_CASE("malformed index files are rejected", "[formats][index]") {
  ScratchDir dir;
  write_two_shards(dir.path());
  const std::string index = index_path(dir);
  const auto rejects = [&](const std::string& text, const std::string& message, std::optional<std::string> tensor) {
    INFO("index: " << text);
    write_text(index, text);
    check_error(safetensors().open(dir.path().string()), {Errc::kCorrupt, message, index, tensor, std::nullopt});
  };
  rejects(R"({"metadata": {}})", "index has no weight_map", "");
  rejects(R"({"weight_map": []})", "weight_map is not an object", "");
  rejects(R"({"weight_map": {"a": 1}})", "must be a shard file name", "a");
  rejects(R"({"weight_map": {"a": "x.safetensors", "a": "y.safetensors"}})", "duplicate key 'a'", std::nullopt);
  rejects(R"({"weight_map": {}, "weight_map": {}})", "duplicate key 'weight_map'", std::nullopt);
  rejects(R"({"metadata": {"total_size": -1}, "weight_map": {}})", "total_size must be a non-negative integer", "");
  rejects(R"({"metadata": {"total_size": "18"}, "weight_map": {}})", "total_size must be a non-negative integer", "");
  rejects(R"({"metadata": [], "weight_map": {}})", "metadata is not an object", "");
  rejects("[1]", "not a JSON object", "");
  rejects("{\"weight_map\": {\"a\": \"x\xff\"}}", "not valid UTF-8", "");
  rejects(R"({"weight_map": {)", "invalid JSON", "");
  rejects(std::string(100, '[') + std::string(100, ']'), "not a JSON object", "");
  rejects("{\"metadata\":" + std::string(100, '[') + std::string(100, ']') + "}", "nested deeper than 64 levels", "");
}

TEST_CASE("two index files in one directory are ambiguous", "[formats][index]") {
  ScratchDir dir;
  write_two_shards(dir.path());
  write_text(index_path(dir), index_json(good_map()));
  write_text(dir.file("consolidated.safetensors.index.json"), index_json(good_map()));
  check_error(safetensors().open(dir.path().string()),
              {Errc::kInvalidArgument,
               "2 safetensors index files (consolidated.safetensors.index.json, model.safetensors.index.json)",
               dir.path().string(), "", std::nullopt});
  // Naming one resolves it.
  CHECK(safetensors().open(index_path(dir)));
}

TEST_CASE("parse_safetensors_index reads weight_map and total_size", "[formats][index]") {
  const auto index = formats::parse_safetensors_index(
      bytes_of(R"({"metadata": {"total_size": 123, "format": "pt"}, "weight_map": {"w": "s/1.safetensors"}, "x": 1})"),
      "idx");
  REQUIRE(index);
  CHECK(index->total_size == 123u);
  CHECK(index->weight_map == std::map<std::string, std::string>{{"w", "s/1.safetensors"}});
}

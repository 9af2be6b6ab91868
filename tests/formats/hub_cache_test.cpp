// Hugging Face model ids through the local cache (hub_cache.hpp): the id grammar, the cache
// folder's precedence, a cache laid out by hand as huggingface_hub lays it out, each way it can
// be incomplete, and a checkpoint opened from it through open_catalog.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "formats_test_support.hpp"
#include "qload/formats/hub_cache.hpp"

using namespace qload;
using namespace qload::testing;
namespace fs = std::filesystem;

namespace {

constexpr const char* kCommit = "0123456789abcdef0123456789abcdef01234567";
constexpr const char* kOther = "fedcba9876543210fedcba9876543210fedcba98";

formats::EnvLookup env_of(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

// <cache>/models--org--tiny with refs/main -> kCommit, refs/v1 -> kOther, each snapshot one
// file linked into blobs/ (a safetensors file with one tensor named after its commit).
struct FakeCache {
  ScratchDir dir;
  fs::path cache = dir.path() / "hub";
  fs::path repo = cache / "models--org--tiny";

  FakeCache() {
    fs::create_directories(repo / "blobs");
    fs::create_directories(repo / "refs");
    snapshot(kCommit, "main_w");
    snapshot(kOther, "v1_w");
    write_text((repo / "refs" / "main").string(), kCommit);
    write_text((repo / "refs" / "v1").string(), kOther);
  }
  fs::path snapshot_dir(const std::string& commit) const { return repo / "snapshots" / commit; }
  void snapshot(const std::string& commit, const std::string& tensor) const {
    fs::create_directories(snapshot_dir(commit));
    write_shard((repo / "blobs" / ("blob-" + commit)).string(), {{tensor, DType::kF32, Shape{4}}});
    fs::create_symlink("../../blobs/blob-" + commit, snapshot_dir(commit) / "model.safetensors");
  }
};

// Sets (or unsets) a variable for the scope of a test; restores what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_.c_str(), old_->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// Runs the scope in another working directory (relative paths are what an id competes with).
class ScopedCwd {
 public:
  explicit ScopedCwd(const fs::path& dir) : old_(fs::current_path()) { fs::current_path(dir); }
  ScopedCwd(const ScopedCwd&) = delete;
  ScopedCwd& operator=(const ScopedCwd&) = delete;
  ~ScopedCwd() {
    std::error_code ec;
    fs::current_path(old_, ec);
  }

 private:
  fs::path old_;
};

// The folder `source` resolves to, or the error's text (so a CHECK shows which).
std::string resolved(const std::string& source, const fs::path& cache) {
  const Result<std::string> got = formats::resolve_source(source, cache);
  return got ? *got : got.error().to_string();
}

}  // namespace

TEST_CASE("hub ids: org/name and @revision as huggingface_hub's validate_repo_id takes them", "[formats][hub]") {
  const auto id = formats::parse_hub_id("Qwen/Qwen2-0.5B");
  REQUIRE(id);
  CHECK(id->repo == "Qwen/Qwen2-0.5B");
  CHECK(id->revision == "main");
  const auto at = formats::parse_hub_id("meta-llama/Llama_3.1-8B@refs/pr/12");
  REQUIRE(at);
  CHECK(at->repo == "meta-llama/Llama_3.1-8B");
  CHECK(at->revision == "refs/pr/12");
  CHECK(formats::parse_hub_id(std::string("org/name@") + kCommit)->revision == kCommit);
  CHECK(formats::parse_hub_id("_a/b_"));
  CHECK(formats::parse_hub_id(std::string(96, 'a') + "/x"));
  for (const std::string& bad : std::vector<std::string>{"name",
                                                         "/abs/path",
                                                         "a/b/c",
                                                         "./a",
                                                         "a/b/",
                                                         "org/.name",
                                                         "org/name.",
                                                         "-org/name",
                                                         "org/na--me",
                                                         "org/na..me",
                                                         "org/name.git",
                                                         "org/na me",
                                                         "org/näme",
                                                         "a/b@",
                                                         "a/b@../x",
                                                         "a/b@x//y",
                                                         "a/b@/x",
                                                         "a/b@x y",
                                                         "a/b@x@y",
                                                         "",
                                                         "model.safetensors",
                                                         std::string(97, 'a') + "/x",
                                                         "a/b@" + std::string(256, 'r')}) {
    INFO(bad);
    CHECK_FALSE(formats::parse_hub_id(bad));
  }
}

TEST_CASE("hub cache folder: huggingface_hub's precedence, '~' and $VAR expanded", "[formats][hub]") {
  using Vars = std::map<std::string, std::string>;
  const Vars home{{"HOME", "/home/u"}};
  CHECK(formats::hub_cache_dir(env_of(home)) == "/home/u/.cache/huggingface/hub");
  CHECK(formats::hub_cache_dir(env_of({{"HOME", "/home/u/"}})) == "/home/u/.cache/huggingface/hub");
  Vars vars = home;
  vars["XDG_CACHE_HOME"] = "/xdg";
  CHECK(formats::hub_cache_dir(env_of(vars)) == "/xdg/huggingface/hub");
  vars["HF_HOME"] = "~/hf";
  CHECK(formats::hub_cache_dir(env_of(vars)) == "/home/u/hf/hub");
  vars["HUGGINGFACE_HUB_CACHE"] = "$HOME/legacy";
  CHECK(formats::hub_cache_dir(env_of(vars)) == "/home/u/legacy");
  vars["HF_HUB_CACHE"] = "${ROOT}/new/$UNSET/x$";
  vars["ROOT"] = "/r";
  CHECK(formats::hub_cache_dir(env_of(vars)) == "/r/new/$UNSET/x$");
  // Variables that are not the cache's change nothing.
  const Vars noise{{"HOME", "/home/u"},          {"HF_TOKEN", "x"},        {"HF_HUB_OFFLINE", "1"},
                   {"HF_ASSETS_CACHE", "/a"},    {"HF_XET_CACHE", "/b"},   {"QLOAD_IO", "pread"},
                   {"TRANSFORMERS_CACHE", "/c"}, {"HF_HUB_CACHE_X", "/d"}, {"XDG_DATA_HOME", "/e"}};
  CHECK(formats::hub_cache_dir(env_of(noise)) == "/home/u/.cache/huggingface/hub");
}

TEST_CASE("hub ids resolve through refs/, a commit names its snapshot directly", "[formats][hub]") {
  FakeCache fake;
  const auto main = formats::resolve_source("org/tiny", fake.cache);
  REQUIRE(main);
  CHECK(*main == fake.snapshot_dir(kCommit).string());
  CHECK(resolved("org/tiny@main", fake.cache) == *main);
  CHECK(resolved("org/tiny@v1", fake.cache) == fake.snapshot_dir(kOther).string());
  CHECK(resolved(std::string("org/tiny@") + kOther, fake.cache) == fake.snapshot_dir(kOther).string());
  // A branch named like a path under refs/ (huggingface_hub writes refs/pr/1 for a pull request).
  fs::create_directories(fake.repo / "refs" / "refs" / "pr");
  write_text((fake.repo / "refs" / "refs" / "pr" / "1").string(), kOther);
  CHECK(resolved("org/tiny@refs/pr/1", fake.cache) == fake.snapshot_dir(kOther).string());
  // What is not an id is left to the drivers, as it was.
  CHECK(resolved("/no/such/model.safetensors", fake.cache) == "/no/such/model.safetensors");
  CHECK(resolved("nothing-here", fake.cache) == "nothing-here");
}

TEST_CASE("hub ids: a missing repository, ref, snapshot or blob is an error naming what was looked for",
          "[formats][hub]") {
  FakeCache fake;
  check_error(formats::resolve_source("org/absent", fake.cache),
              {Errc::kNotFound, "Hugging Face cache", (fake.cache / "models--org--absent").string(), {}, {}});
  const auto absent = formats::resolve_source("org/absent", fake.cache);
  CHECK_THAT(absent.error().message(), Catch::Contains(fake.cache.string()) && Catch::Contains("no such file"));
  check_error(formats::resolve_source("org/tiny@v2", fake.cache),
              {Errc::kNotFound, "revision 'v2'", (fake.repo / "refs" / "v2").string(), {}, {}});
  check_error(formats::resolve_source("org/tiny@aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", fake.cache),
              {Errc::kNotFound,
               "not in the Hugging Face cache",
               fake.snapshot_dir("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa").string(),
               {},
               {}});
  // A ref to a commit whose snapshot is gone.
  write_text((fake.repo / "refs" / "gone").string(), "1111111111111111111111111111111111111111");
  check_error(formats::resolve_source("org/tiny@gone", fake.cache),
              {Errc::kNotFound,
               "is commit 1111111111111111111111111111111111111111",
               fake.snapshot_dir("1111111111111111111111111111111111111111").string(),
               {},
               {}});
  // A snapshot file whose blob was deleted.
  fs::remove(fake.repo / "blobs" / (std::string("blob-") + kOther));
  check_error(formats::resolve_source("org/tiny@v1", fake.cache),
              {Errc::kNotFound,
               (fake.repo / "blobs" / (std::string("blob-") + kOther)).string(),
               (fake.snapshot_dir(kOther) / "model.safetensors").string(),
               {},
               {}});
  // And in a folder of the snapshot.
  fs::create_directories(fake.snapshot_dir(kCommit) / "sub");
  fs::create_symlink("../../../blobs/missing", fake.snapshot_dir(kCommit) / "sub" / "tokenizer.json");
  check_error(
      formats::resolve_source("org/tiny", fake.cache),
      {Errc::kNotFound, "is missing", (fake.snapshot_dir(kCommit) / "sub" / "tokenizer.json").string(), {}, {}});
}

TEST_CASE("hub ids: a ref file is untrusted, only a bare 40-digit hash is taken", "[formats][hub][security]") {
  FakeCache fake;
  const fs::path ref = fake.repo / "refs" / "main";
  for (const std::string& bad : std::vector<std::string>{
           std::string(kCommit) + "\n", std::string(kCommit).substr(0, 39), std::string(""),
           std::string("../../../../etc"), std::string("0123456789ABCDEF0123456789ABCDEF01234567")}) {
    INFO(bad);
    write_text(ref.string(), bad);
    check_error(formats::resolve_source("org/tiny", fake.cache),
                {Errc::kCorrupt, "40-digit commit hash", ref.string(), {}, {}});
  }
  write_text(ref.string(), std::string(1 << 20, '0'));  // read bounded, not whole
  const auto big = formats::resolve_source("org/tiny", fake.cache);
  REQUIRE_FALSE(big);
  CHECK(big.error().file() == ref.string());
  fs::remove(ref);
  fs::create_directory(ref);  // not a file at all
  check_error(formats::resolve_source("org/tiny", fake.cache), {Errc::kNotFound, "no ref file", ref.string(), {}, {}});
}

TEST_CASE("hub ids: a path that exists wins over an id", "[formats][hub]") {
  FakeCache fake;
  ScratchDir work;
  const ScopedCwd cwd(work.path());
  fs::create_directories(work.path() / "org" / "tiny");
  write_shard((work.path() / "org" / "tiny" / "model.safetensors").string(), {{"local", DType::kU8, Shape{2}}});
  CHECK(resolved("org/tiny", fake.cache) == "org/tiny");
  const auto catalog = formats::open_catalog("org/tiny", fake.cache);
  if (!catalog) FAIL(catalog.error().to_string());
  CHECK(catalog->tensors.at(0).name == "local");
  // Even a dangling link: the local name is what the user meant, and opening it says why not.
  fs::remove_all(work.path() / "org" / "tiny");
  fs::create_symlink("nowhere", work.path() / "org" / "tiny");
  CHECK(resolved("org/tiny", fake.cache) == "org/tiny");
  CHECK(formats::open_catalog("org/tiny", fake.cache).error().code() == Errc::kNotFound);
  // Without it, the id is looked up.
  fs::remove(work.path() / "org" / "tiny");
  CHECK(resolved("org/tiny", fake.cache) == fake.snapshot_dir(kCommit).string());
}

TEST_CASE("hub ids: a sharded checkpoint in the cache opens through open_catalog, its blobs allowed",
          "[formats][hub]") {
  FakeCache fake;
  // A second model: two shards, an index and config.json, all links into blobs/.
  const fs::path repo = fake.cache / "models--acme--Sharded-1.5B";
  const fs::path snapshot = repo / "snapshots" / kCommit;
  fs::create_directories(repo / "blobs");
  fs::create_directories(repo / "refs");
  fs::create_directories(snapshot);
  write_text((repo / "refs" / "main").string(), kCommit);
  write_shard((repo / "blobs" / "b1").string(), {{"a", DType::kF32, Shape{8}}, {"b", DType::kBF16, Shape{2, 3}}});
  write_shard((repo / "blobs" / "b2").string(), {{"c", DType::kI8, Shape{5}}});
  write_text((repo / "blobs" / "b3").string(),
             R"({"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors",)"
             R"( "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}})");
  write_text((repo / "blobs" / "b4").string(), R"({"model_type": "llama", "torch_dtype": "float32"})");
  fs::create_symlink("../../blobs/b1", snapshot / "model-00001-of-00002.safetensors");
  fs::create_symlink("../../blobs/b2", snapshot / "model-00002-of-00002.safetensors");
  fs::create_symlink("../../blobs/b3", snapshot / "model.safetensors.index.json");
  fs::create_symlink("../../blobs/b4", snapshot / "config.json");

  // An unrelated HF_* or QLOAD_* variable, even a cache variable, does not change a load given
  // its cache folder.
  const ScopedEnv hub("HF_HUB_CACHE", "/nonexistent/hf");
  const ScopedEnv home("HF_HOME", "/nonexistent/home");
  const ScopedEnv io("QLOAD_IO", "pread");
  const auto catalog = formats::open_catalog("acme/Sharded-1.5B", fake.cache);
  if (!catalog) FAIL(catalog.error().to_string());
  CHECK(catalog->source == snapshot.string());
  REQUIRE(catalog->tensors.size() == 3);
  REQUIRE(catalog->files.size() == 2);
  CHECK(catalog->files[0].path == (snapshot / "model-00001-of-00002.safetensors").string());
  CHECK_THAT(catalog->config_json, Catch::Contains("llama"));
  // The bytes the catalog points at are the blob's.
  const formats::TensorEntry& c = catalog->tensors.back();
  CHECK(c.name == "c");
  std::ifstream in(catalog->files[c.file].path, std::ios::binary);
  std::vector<char> got(c.nbytes);
  in.seekg(static_cast<std::streamoff>(c.offset));
  in.read(got.data(), static_cast<std::streamsize>(got.size()));
  const std::vector<std::byte> want = random_bytes(5, sample_seed(0));
  CHECK(std::memcmp(got.data(), want.data(), want.size()) == 0);

  // A failure after the id resolved says which id it was.
  fs::remove(repo / "blobs" / "b2");
  write_text((repo / "blobs" / "b2").string(), "not safetensors");
  const auto broken = formats::open_catalog("acme/Sharded-1.5B", fake.cache);
  REQUIRE_FALSE(broken);
  CHECK_THAT(broken.error().to_string(), Catch::Contains("Hugging Face model acme/Sharded-1.5B"));
}

TEST_CASE("hub ids: open_catalog without a cache folder reads HF_HUB_CACHE", "[formats][hub]") {
  FakeCache fake;
  const ScopedEnv hub("HF_HUB_CACHE", fake.cache.c_str());
  const auto catalog = formats::open_catalog("org/tiny@v1");
  if (!catalog) FAIL(catalog.error().to_string());
  CHECK(catalog->tensors.at(0).name == "v1_w");
  const auto from_env = formats::resolve_source("org/tiny");
  REQUIRE(from_env);
  CHECK(*from_env == fake.snapshot_dir(kCommit).string());
}

TEST_CASE("hub snapshots: only the repository's own blobs/, a real folder, is allowed", "[formats][hub][security]") {
  FakeCache fake;
  ScratchDir outside;
  write_shard(outside.file("secret.safetensors"), {{"s", DType::kU8, Shape{4}}});
  // blobs/ replaced by a link elsewhere: the snapshot's links then resolve outside the model.
  fs::rename(fake.repo / "blobs", fake.repo / "blobs-real");
  fs::create_symlink(outside.path(), fake.repo / "blobs");
  fs::remove(fake.snapshot_dir(kCommit) / "model.safetensors");
  fs::create_symlink("../../blobs/secret.safetensors", fake.snapshot_dir(kCommit) / "model.safetensors");
  check_error(formats::open_catalog("org/tiny", fake.cache),
              {Errc::kCorrupt, "outside the model directory", "", {}, {}});
  // A folder laid out as a snapshot but not in a models--org--name repository gets no blobs/.
  const fs::path other = fake.dir.path() / "not-a-repo";
  fs::create_directories(other / "blobs");
  fs::create_directories(other / "snapshots" / kCommit);
  write_shard((other / "blobs" / "x").string(), {{"x", DType::kU8, Shape{4}}});
  fs::create_symlink("../../blobs/x", other / "snapshots" / kCommit / "model.safetensors");
  check_error(formats::open_catalog((other / "snapshots" / kCommit).string()),
              {Errc::kCorrupt, "outside the model directory", "", {}, {}});
}

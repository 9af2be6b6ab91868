// libFuzzer target: Hugging Face model ids and their cache, from untrusted text. The input is
// three fields separated by NUL bytes: a source (a CLI argument, a recipe's `source`), parsed
// by the id grammar; a value every environment variable is given, from which the cache folder
// is expanded as huggingface_hub expands it (~, $VAR, ${VAR}); and the bytes of a ref file,
// which the resolution reads (bounded) and must refuse unless they are a commit hash.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "qload/formats/hub_cache.hpp"

namespace {

namespace fs = std::filesystem;
using qload::formats::HubId;

std::string_view next_field(std::string_view& text) {
  const std::size_t end = text.find('\0');
  const std::string_view field = text.substr(0, end);
  text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
  return field;
}

const fs::path& cache();

fs::path* make_cache() {
  std::string pattern = (fs::temp_directory_path() / "qload-fuzz-hub-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) std::abort();
  const fs::path dir(pattern);
  fs::create_directories(dir / "models--org--name" / "refs");
  fs::create_directories(dir / "models--org--name" / "snapshots" / std::string(40, 'a'));
  std::atexit([] {
    std::error_code ignored;
    fs::remove_all(cache(), ignored);
  });
  return new fs::path(dir);
}

// One cache for the whole run, with models--org--name/refs/ and one snapshot: each input writes
// refs/main and resolves it. Never destroyed: the exit handler that removes it uses it.
const fs::path& cache() {
  static const fs::path* const dir = make_cache();
  return *dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::string source(next_field(text));
  const std::string value(next_field(text));
  if (const auto id = qload::formats::parse_hub_id(source)) {
    // What the grammar accepts is an org, a '/', a name, and a non-empty revision.
    if (id->repo.find('/') == std::string::npos || id->revision.empty()) std::abort();
  }
  (void)qload::formats::hub_cache_dir([&](const char*) { return value.c_str(); });
  {
    std::ofstream ref(cache() / "models--org--name" / "refs" / "main", std::ios::binary | std::ios::trunc);
    ref.write(text.data(), static_cast<std::streamsize>(text.size()));
  }
  const auto resolved = qload::formats::resolve_hub_id(HubId{.repo = "org/name", .revision = "main"}, cache());
  // Only the one commit whose snapshot exists resolves.
  if (resolved && text != std::string(40, 'a')) std::abort();
  return 0;
}

#include "path_guard.hpp"

#include <algorithm>
#include <system_error>

#include <fmt/format.h>

#include "located_error.hpp"

namespace qload::formats {
namespace fs = std::filesystem;
namespace {

bool is_within(const fs::path& child, const fs::path& root) {
  // Component-wise, so "/models/a" does not count as inside "/models/ab".
  return std::mismatch(root.begin(), root.end(), child.begin(), child.end()).first == root.end();
}

}  // namespace

Result<ModelRoot> model_root(const fs::path& dir) {
  std::error_code ec;
  const fs::path real = fs::canonical(dir, ec);
  if (ec) return fail(Error::from_errno(ec.value(), "resolve model directory").with_file(dir.string()));
  ModelRoot root{.dir = dir, .allowed = {real}};
  // Only a model repository's own blobs/, and only a real folder: a blobs/ that is a link could
  // point anywhere (at /), and would make everything under it an allowed root.
  const fs::path repo = real.parent_path().parent_path();
  if (real.parent_path().filename() == "snapshots" && repo.filename().string().starts_with("models--")) {
    const fs::path blobs = repo / "blobs";
    if (fs::symlink_status(blobs, ec).type() == fs::file_type::directory) root.allowed.push_back(blobs);
  }
  return root;
}

Status check_relative_name(std::string_view name, const std::string& source, std::string_view tensor) {
  const auto reject = [&](std::string_view why) {
    return fail(
        located(Errc::kCorrupt,
                fmt::format("shard name {} {}; shard files must be inside the model directory", quote_name(name), why),
                source, tensor));
  };
  if (name.empty()) return reject("is empty");
  if (name.find('\0') != std::string_view::npos) return reject("contains a NUL byte");
  if (name.find('\\') != std::string_view::npos) return reject("contains a backslash");
  if (name.front() == '/') return reject("is an absolute path");
  for (const fs::path& part : fs::path(name))
    if (part == "..") return reject("has a '..' component");
  return {};
}

Result<std::string> resolve_inside(const ModelRoot& root, std::string_view name) {
  const fs::path joined = root.dir / fs::path(name);
  std::error_code ec;
  const fs::path resolved = fs::weakly_canonical(joined, ec);
  if (ec) return fail(Error::from_errno(ec.value(), "resolve").with_file(joined.string()));
  for (const fs::path& allowed : root.allowed)
    if (is_within(resolved, allowed)) return joined.string();
  return fail(located(Errc::kCorrupt,
                      fmt::format("{} resolves to {}, outside the model directory {}", quote_name(name),
                                  quote_name(resolved.string()), quote_name(root.allowed.front().string())),
                      joined.string()));
}

Result<OpenedFile> open_inside(const ModelRoot& root, const std::string& path) {
  QLOAD_ASSIGN_OR_RETURN(OpenedFile file, open_regular_file(path));
  QLOAD_ASSIGN_OR_RETURN(const std::string real, io::descriptor_path(file.fd.get(), path));
  for (const fs::path& allowed : root.allowed)
    if (is_within(fs::path(real), allowed)) return file;
  return fail(located(Errc::kCorrupt,
                      fmt::format("the file opened is {}, outside the model directory {}", quote_name(real),
                                  quote_name(root.allowed.front().string())),
                      path));
}

}  // namespace qload::formats

#include "world_auth.hpp"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <memory>

#include <fmt/format.h>

#include "qload/runtime/unique_fd.hpp"

namespace qload::distributed::detail {
namespace {

struct MacCtxDeleter {
  void operator()(EVP_MAC_CTX* ctx) const noexcept { EVP_MAC_CTX_free(ctx); }
};
struct MacDeleter {
  void operator()(EVP_MAC* mac) const noexcept { EVP_MAC_free(mac); }
};

std::string hex(std::string_view bytes) {
  std::string out;
  for (const char c : bytes) out += fmt::format("{:02x}", static_cast<unsigned char>(c));
  return out;
}

// The folder for auto tokens: made if missing, and refused unless it is a real folder of this
// user that nobody else can enter (else another user could plant or read a token there).
Result<std::string> private_dir(const World& world) {
  const std::string dir = world.runtime_dir.empty() ? fmt::format("/tmp/qload-{}", ::geteuid())
                                                    : fmt::format("{}/qload", world.runtime_dir);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return fail(Error::from_errno(errno, "rendezvous: making the folder for the world token").with_file(dir));
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0)
    return fail(Error::from_errno(errno, "rendezvous: the folder for the world token").with_file(dir));
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0)
    return fail(Error(Errc::kPermissionDenied,
                      fmt::format("rendezvous: {} (where a one-node world keeps its token) is not a private folder "
                                  "of this user (mode {:04o}, owner uid {}); remove it, or set QLOAD_WORLD_TOKEN",
                                  dir, st.st_mode & 07777, st.st_uid))
                    .with_file(dir));
  return dir;
}

}  // namespace

Mac hmac_sha256(std::string_view key, std::initializer_list<std::string_view> parts) {
  // EVP_MAC (OpenSSL 3). A failure here is a broken libcrypto, not bad input: no MAC can be
  // made, so nothing could be authenticated, and continuing would be unsafe.
  const std::unique_ptr<EVP_MAC, MacDeleter> mac(EVP_MAC_fetch(nullptr, "HMAC", nullptr));
  const std::unique_ptr<EVP_MAC_CTX, MacCtxDeleter> ctx(mac ? EVP_MAC_CTX_new(mac.get()) : nullptr);
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", digest, 0), OSSL_PARAM_construct_end()};
  Mac out{};
  std::size_t length = 0;
  bool ok = ctx && EVP_MAC_init(ctx.get(), reinterpret_cast<const unsigned char*>(key.data()), key.size(), params) == 1;
  for (const std::string_view part : parts)
    ok = ok && EVP_MAC_update(ctx.get(), reinterpret_cast<const unsigned char*>(part.data()), part.size()) == 1;
  ok = ok && EVP_MAC_final(ctx.get(), out.data(), &length, out.size()) == 1 && length == out.size();
  if (!ok) {
    fmt::print(stderr, "qload: fatal: OpenSSL could not compute HMAC-SHA256\n");
    std::abort();
  }
  return out;
}

bool same_mac(const Mac& a, const Mac& b) noexcept {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

Result<Nonce> fresh_nonce() {
  Nonce n{};
  std::size_t got = 0;
  while (got < n.size()) {
    const ssize_t r = ::getrandom(n.data() + got, n.size() - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return fail(Error::from_errno(errno, "rendezvous: getrandom"));
    got += static_cast<std::size_t>(r);
  }
  return n;
}

Result<std::string> auto_token_path(const World& world) {
  QLOAD_ASSIGN_OR_RETURN(const std::string dir, private_dir(world));
  return fmt::format("{}/rendezvous-{}.token", dir, world.master_port);
}

Result<AutoTokenFile> AutoTokenFile::create(const World& world) {
  QLOAD_ASSIGN_OR_RETURN(const std::string path, auto_token_path(world));
  QLOAD_ASSIGN_OR_RETURN(const Nonce secret, fresh_nonce());
  std::string token = hex(bytes_of(secret));
  // Written under a fresh name and renamed over the old one, so a reader sees a whole token.
  const std::string temp = fmt::format("{}.{}", path, ::getpid());
  {
    const UniqueFd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd) return fail(Error::from_errno(errno, "rendezvous: writing the world token").with_file(temp));
    if (::write(fd.get(), token.data(), token.size()) != static_cast<ssize_t>(token.size())) {
      ::unlink(temp.c_str());
      return fail(Error::from_errno(errno, "rendezvous: writing the world token").with_file(temp));
    }
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    return fail(Error::from_errno(err, "rendezvous: placing the world token").with_file(path));
  }
  return AutoTokenFile(path, std::move(token));
}

AutoTokenFile& AutoTokenFile::operator=(AutoTokenFile&& other) noexcept {
  if (this != &other) {
    remove();
    path_ = std::move(other.path_);
    token_ = std::move(other.token_);
    other.path_.clear();
  }
  return *this;
}

void AutoTokenFile::remove() noexcept {
  if (!path_.empty()) ::unlink(path_.c_str());
  path_.clear();
}

Result<std::string> read_auto_token(const World& world) {
  QLOAD_ASSIGN_OR_RETURN(const std::string path, auto_token_path(world));
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return fail(Error::from_errno(errno, "rendezvous: rank 0's world token").with_file(path));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0)
    return fail(Error(Errc::kPermissionDenied, "rendezvous: rank 0's world token is not a private file of this user")
                    .with_file(path));
  std::string token(64, '\0');
  const ssize_t n = ::read(fd.get(), token.data(), token.size());
  if (n < 0) return fail(Error::from_errno(errno, "rendezvous: reading rank 0's world token").with_file(path));
  token.resize(static_cast<std::size_t>(n));
  return token;
}

}  // namespace qload::distributed::detail

// What the rendezvous authenticates with: HMAC-SHA256 (OpenSSL), fresh nonces (getrandom), and
// the token of a world that was given none (one node only: rank 0 writes a random token into a
// file only this user can read, the other ranks read it; see rendezvous.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "qload/distributed/world.hpp"
#include "qload/runtime/error.hpp"

namespace qload::distributed::detail {

using Mac = std::array<unsigned char, 32>;
using Nonce = std::array<unsigned char, 32>;

// HMAC-SHA256 of the concatenated `parts` under `key`.
Mac hmac_sha256(std::string_view key, std::initializer_list<std::string_view> parts);
// Constant-time equality: how long a comparison takes must not say how much of a MAC was right.
bool same_mac(const Mac& a, const Mac& b) noexcept;
Result<Nonce> fresh_nonce();

inline std::string_view bytes_of(const Nonce& n) {
  return {reinterpret_cast<const char*>(n.data()), n.size()};
}

// The file through which a one-node world without a token shares rank 0's token:
// <runtime_dir or /tmp/qload-<uid>>/rendezvous-<port>.token. Its folder is made (0700) and checked
// to be this user's and private; kPermissionDenied naming it when it is not.
Result<std::string> auto_token_path(const World& world);

// Rank 0: a fresh random token, written (0600, atomically) where auto_token_path says. The
// returned guard removes the file when it goes (once every rank has joined, or on failure).
class AutoTokenFile {
 public:
  static Result<AutoTokenFile> create(const World& world);
  AutoTokenFile(AutoTokenFile&& other) noexcept : path_(std::move(other.path_)), token_(std::move(other.token_)) {
    other.path_.clear();
  }
  AutoTokenFile& operator=(AutoTokenFile&& other) noexcept;
  ~AutoTokenFile() { remove(); }
  const std::string& token() const noexcept { return token_; }

 private:
  AutoTokenFile(std::string path, std::string token) : path_(std::move(path)), token_(std::move(token)) {}
  void remove() noexcept;
  std::string path_;
  std::string token_;
};

// Any other rank: the token rank 0 wrote; kNotFound while it is not there yet.
Result<std::string> read_auto_token(const World& world);

}  // namespace qload::distributed::detail

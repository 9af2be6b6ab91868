// A build without Gloo (QLOAD_GLOO=OFF, or libgloo-dev missing): host memory cannot move between
// processes, so the loads that need it are refused by name.
#include "gloo_group.hpp"

namespace qload::distributed::detail {

struct GlooGroup {};

void GlooGroupDeleter::operator()(GlooGroup* group) const noexcept {
  delete group;
}

Result<GlooGroupPtr> make_gloo_group(Rendezvous&, std::chrono::milliseconds) {
  return fail(Errc::kUnsupported,
              "this qload was built without Gloo (libgloo-dev), which moves host memory between processes");
}

struct GlooExchange {};

void GlooExchangeDeleter::operator()(GlooExchange* exchange) const noexcept {
  delete exchange;
}

Result<GlooExchangePtr> gloo_post(GlooGroup&, std::vector<HostMove>) {
  return fail(Errc::kUnsupported, "this qload was built without Gloo");
}

Status gloo_send(GlooExchange&, std::size_t) {
  return fail(Errc::kUnsupported, "this qload was built without Gloo");
}

Status gloo_finish(GlooExchange&) {
  return fail(Errc::kUnsupported, "this qload was built without Gloo");
}

}  // namespace qload::distributed::detail

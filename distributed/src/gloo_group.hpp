// Host memory between the processes of a load moves through Gloo (Facebook's collective
// library, TCP transport): a full mesh of connections whose addresses are exchanged over the
// authenticated rendezvous, then point-to-point sends straight from the sender to each receiver.
// Gloo reports errors by throwing; everything here catches them and returns errors naming the
// rank and the operation. Built only where Gloo is found (gloo_group_none.cpp otherwise).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>

#include "qload/distributed/communicator.hpp"
#include "qload/distributed/rendezvous.hpp"
#include "qload/runtime/error.hpp"

namespace qload::distributed::detail {

// GlooGroup and its deleter are declared in communicator.hpp, which owns one.
using GlooGroupPtr = std::unique_ptr<GlooGroup, GlooGroupDeleter>;

// Every rank calls it together. kUnsupported in a build without Gloo; kIo naming the rank when
// the mesh cannot be built within `timeout`.
Result<GlooGroupPtr> make_gloo_group(Rendezvous& rendezvous, std::chrono::milliseconds timeout);

// Communicator::post_moves: one Gloo slot per move (the same on every rank); this rank's
// receives posted now, its sends by gloo_send, all waited for by gloo_finish, each up to the
// group's timeout. Null when this rank is in none of the moves.
using GlooExchangePtr = std::unique_ptr<GlooExchange, GlooExchangeDeleter>;
Result<GlooExchangePtr> gloo_post(GlooGroup& group, std::vector<HostMove> moves);
Status gloo_send(GlooExchange& exchange, std::size_t i);
Status gloo_finish(GlooExchange& exchange);

}  // namespace qload::distributed::detail

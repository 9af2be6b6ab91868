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

#include "qload/dist/communicator.hpp"
#include "qload/dist/rendezvous.hpp"
#include "qload/runtime/error.hpp"

namespace qload::detail {

// GlooGroup and its deleter are declared in communicator.hpp, which owns one.
using GlooGroupPtr = std::unique_ptr<GlooGroup, GlooGroupDeleter>;

// Every rank calls it together. kUnsupported in a build without Gloo; kIo naming the rank when
// the mesh cannot be built within `timeout`.
Result<GlooGroupPtr> make_gloo_group(Rendezvous& rendezvous, std::chrono::milliseconds timeout);

// Communicator::move: every move this rank is in, issued at once (one Gloo slot per move, the
// same on every rank), then waited for, each up to the group's timeout (zero: no limit).
Status gloo_moves(GlooGroup& group, std::span<const HostMove> moves);

}  // namespace qload::detail

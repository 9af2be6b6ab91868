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

// One transfer: the root sends `to_each[q]` to every rank q that is not the root (an empty span
// sends nothing); every other rank receives its part into `mine`, whose size every rank agrees
// on beforehand. Returns when this rank's part of it is done. Waits up to the group's timeout
// for each part (zero: no limit).
Status gloo_send_parts(GlooGroup& group, std::span<const std::span<const std::byte>> to_each, std::span<std::byte> mine,
                       std::uint32_t root);

}  // namespace qload::detail

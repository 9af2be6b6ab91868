// `qload plan PATH|RECIPE`: what a load would do, without reading a tensor byte: per tensor its
// file range, where it lands or which decode takes it; per decode what it makes; the plan hash
// a lock records. Same recipe and same files: same plan, same hash.
#include <fmt/format.h>

#include "commands.hpp"
#include "qload/runtime/units.hpp"
#include "qload/session/plan_report.hpp"

namespace qload::cli {

int run_plan(const LoadArgs& args) {
  auto request = load_request(args);
  if (!request) return report(request.error());
  auto planned = session::plan_request(std::move(*request));
  if (!planned) return report(planned.error());
  if (args.json) {
    nlohmann::json plan = session::plan_json(planned->catalog, planned->plan);
    plan["plan_xxh3_64"] = fmt::format("{:016x}", planned->plan_hash);
    fmt::print("{}\n", plan.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
    return 0;
  }
  fmt::print("{:<52} {:>9} {:>12} {:<8} {:>12} {:>12} {}\n", "tensor", "file", "offset", "device", "arena off", "bytes",
             "dtype / decode");
  // One entry at a time: a plan of millions of tensors prints in memory for one line.
  const auto print_tensor = [](const nlohmann::json& t) {
    const std::string name = escape_for_terminal(t["name"].get<std::string>());
    const std::string file = escape_for_terminal(t["file"].get<std::string>());
    if (t.contains("shards")) {
      for (const nlohmann::json& sh : t["shards"])
        fmt::print("{:<52} {:>9} {:>12} {:<8} {:>12} {:>12} {} {} (rank {})\n", name, file,
                   t["file_offset"].get<std::uint64_t>(), sh["device"].get<std::string>(),
                   sh["offset"].get<std::uint64_t>(), sh["bytes"].get<std::uint64_t>(), sh["dtype"].get<std::string>(),
                   sh["split"].get<std::string>(), sh["rank"].get<std::uint32_t>());
    } else if (t.contains("placed")) {
      const nlohmann::json& p = t["placed"];
      fmt::print("{:<52} {:>9} {:>12} {:<8} {:>12} {:>12} {}\n", name, file, t["file_offset"].get<std::uint64_t>(),
                 p["device"].get<std::string>(), p["offset"].get<std::uint64_t>(), p["bytes"].get<std::uint64_t>(),
                 p["dtype"].get<std::string>());
    } else {
      fmt::print("{:<52} {:>9} {:>12} {:<8} {:>12} {:>12} -> {}\n", name, file, t["file_offset"].get<std::uint64_t>(),
                 "", "", t["bytes"].get<std::uint64_t>(), t.value("decode", std::string("(no bytes)")));
    }
  };
  const auto print_decode = [](const nlohmann::json& d) {
    for (const nlohmann::json& o : d["outputs"])
      fmt::print("{:<52} {:>9} {:>12} {:<8} {:>12} {:>12} {} ({})\n", escape_for_terminal(o["name"].get<std::string>()),
                 "", "", o["device"].get<std::string>(), o["offset"].get<std::uint64_t>(),
                 o["bytes"].get<std::uint64_t>(), o["dtype"].get<std::string>(), d["kind"].get<std::string>());
  };
  session::for_each_plan_entry(planned->catalog, planned->plan, print_tensor, print_decode);
  const scheduler::Plan& p = planned->plan;
  fmt::print("plan: {} tensors, {} stored, {} placed, {} decode jobs over {} arena(s); plan hash {}\n",
             planned->catalog.tensors.size(), format_bytes(p.layout.tensor_bytes), format_bytes(p.layout.placed_bytes),
             p.decode.jobs.size(), p.layout.arenas.size(), fmt::format("{:016x}", planned->plan_hash));
  return 0;
}

}  // namespace qload::cli

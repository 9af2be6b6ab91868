#include "qload/session/world_load.hpp"

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "qload/io/digest.hpp"
#include "qload/scheduler/page_cache.hpp"
#include "qload/session/lockfile.hpp"
#include "qload/session/plan_report.hpp"

namespace qload::session {
namespace {

using nlohmann::json;

std::string hash_of(const json& value) {
  const std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  return io::hex64(io::xxh3_64(std::as_bytes(std::span(text))));
}

}  // namespace

LoadFingerprint load_fingerprint(const PlannedLoad& load) {
  json files = json::array();
  for (const formats::CatalogFile& f : load.catalog.files)
    files.push_back({path_in_checkpoint(load.catalog, f.path), f.size});
  json tensors = json::array();
  for (const formats::TensorEntry& t : load.catalog.tensors) {
    json shape = json::array();
    for (std::size_t i = 0; i < t.shape.rank(); ++i) shape.push_back(t.shape[i]);
    json entry = {t.name, std::string(dtype_name(t.dtype)), shape, t.file, t.offset, t.nbytes};
    if (t.ggml_type) entry.push_back(*t.ggml_type);  // Q4_0 and IQ4_NL blocks have the same size
    if (!t.strides.empty()) entry.push_back({{"strides", t.strides}});
    tensors.push_back(std::move(entry));
  }
  const scheduler::PlanOptions& o = load.request.options.plan;
  const scheduler::ParallelLayout& par = o.parallel;
  const json options = {
      {"recipe", load.request.recipe ? io::hex64(load.request.recipe->hash) : ""},
      {"dtype", o.dtype ? std::string(dtype_name(*o.dtype)) : ""},
      {"dequantize", o.dequantize ? std::string(dtype_name(*o.dequantize)) : ""},
      {"quantize", o.quantize ? std::string(formats::quantize_target_name(*o.quantize)) : ""},
      {"repack", o.repack},
      {"whole_tensor_reads", o.whole_tensor_reads},
  };
  return LoadFingerprint{
      .checkpoint = hash_of({{"files", files}, {"tensors", tensors}}),
      .layout = fmt::format("tp {} x pp {} x dp {} over {} processes of {} device{}{}", par.tensor, par.pipeline,
                            par.data, par.processes, o.devices.size(), o.devices.size() == 1 ? "" : "s",
                            par.share_reads ? ", reads shared" : ""),
      .options = hash_of(options),
  };
}

Status agree_on_load(distributed::Rendezvous& rendezvous, const Result<PlannedLoad>& load) {
  json message;
  if (load) {
    const LoadFingerprint mine = load_fingerprint(*load);
    message = {{"checkpoint", mine.checkpoint}, {"layout", mine.layout}, {"options", mine.options}};
  } else {
    message = {{"error", load.error().to_string()}};
  }
  Result<std::vector<std::string>> exchanged = rendezvous.allgather(message.dump());
  if (!exchanged) return fail(std::move(exchanged.error()).with_note("stage: agreeing on the load, before reading"));
  const std::vector<std::string>& all = *exchanged;
  if (!load) return {};
  std::vector<json> parsed;
  for (std::uint32_t r = 0; r < all.size(); ++r) {
    parsed.push_back(json::parse(all[r], nullptr, /*allow_exceptions=*/false));
    if (!parsed.back().is_object()) return fail(Error(Errc::kIo, fmt::format("rank {} sent a malformed plan", r)));
    if (parsed.back().contains("error"))
      return fail(Error(Errc::kCancelled, fmt::format("rank {} could not prepare its load, so this rank stops: {}", r,
                                                      parsed.back().value("error", ""))));
  }
  const json& first = parsed[0];
  for (std::uint32_t r = 1; r < parsed.size(); ++r) {
    const json& other = parsed[r];
    std::vector<std::string> differ;
    for (const char* part : {"checkpoint", "layout", "options"})
      if (!other.contains(part) || !first.contains(part) || other[part] != first[part]) differ.push_back(part);
    if (differ.empty()) continue;
    std::string detail;
    if (std::ranges::find(differ, "layout") != differ.end() && other.contains("layout") && first.contains("layout"))
      detail = fmt::format(": rank 0 has {}, rank {} has {}", first["layout"].get<std::string>(), r,
                           other["layout"].get<std::string>());
    return fail(
        Error(Errc::kInvalidArgument, fmt::format("rank {} planned a different load from rank 0 (its {} differ{}){}", r,
                                                  fmt::join(differ, " and "), differ.size() == 1 ? "s" : "", detail)));
  }
  return {};
}

Status unshare_cached_reads(distributed::Rendezvous& rendezvous, PlannedLoad& load, const Logger& log) {
  if (!load.request.options.plan.parallel.share_reads) return {};
  const bool asks = load.request.settings.values().share_cached == "auto" && load.request.lock.empty();
  const double mine = asks ? scheduler::page_cache_fraction(load.catalog) : -1.0;  // -1: shares anyway
  Result<std::vector<std::string>> exchanged = rendezvous.allgather(fmt::format("{:.6f}", mine));
  if (!exchanged)
    return fail(std::move(exchanged.error()).with_note("stage: telling the page cache's share, before reading"));
  double least = 1.0;
  for (const std::string& s : *exchanged) least = std::min(least, std::strtod(s.c_str(), nullptr));
  if (least < scheduler::kCachedEnough) return {};
  log.info(
      fmt::format("reads not shared: the page cache holds at least {:.0f}% of the checkpoint on every rank, so "
                  "each process reads its own part from it (share_cached always shares anyway)",
                  100 * least));
  LoadRequest request = std::move(load.request);
  request.options.plan.parallel.share_reads = false;
  QLOAD_ASSIGN_OR_RETURN(load, prepare(std::move(request)));
  return {};
}

Result<std::vector<RankOutcome>> share_outcome(distributed::Rendezvous& rendezvous, const RankOutcome& mine,
                                               std::chrono::milliseconds straggler_timeout) {
  const json message = {{"ok", mine.ok},
                        {"error", mine.error},
                        {"node", mine.node},
                        {"read_bytes", mine.read_bytes},
                        {"received_bytes", mine.received_bytes},
                        {"tensor_bytes", mine.tensor_bytes},
                        {"seconds", mine.seconds}};
  // The others may still be loading: wait for the slowest (a rank that dies closes its socket).
  Result<std::vector<std::string>> exchanged = rendezvous.allgather(message.dump(), straggler_timeout);
  if (!exchanged)
    return fail(
        std::move(exchanged.error())
            .with_note(fmt::format("stage: sharing every rank's outcome, after loading (the "
                                   "straggler_timeout setting: {})",
                                   straggler_timeout.count() > 0 ? fmt::format("{} ms", straggler_timeout.count())
                                                                 : std::string("no limit"))));
  const std::vector<std::string>& all = *exchanged;
  std::vector<RankOutcome> out;
  for (std::uint32_t r = 0; r < all.size(); ++r) {
    const json j = json::parse(all[r], nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("ok"))
      return fail(Error(Errc::kIo, fmt::format("rank {} sent a malformed outcome", r)));
    out.push_back(RankOutcome{.ok = j.value("ok", false),
                              .error = j.value("error", ""),
                              .node = j.value("node", std::uint32_t{0}),
                              .read_bytes = j.value("read_bytes", std::uint64_t{0}),
                              .tensor_bytes = j.value("tensor_bytes", std::uint64_t{0}),
                              .received_bytes = j.value("received_bytes", std::uint64_t{0}),
                              .seconds = j.value("seconds", 0.0)});
  }
  if (mine.ok)
    for (std::uint32_t r = 0; r < out.size(); ++r)
      if (!out[r].ok)
        return fail(Error(Errc::kCancelled,
                          fmt::format("rank {} failed, so this rank's load is dropped: {}", r, out[r].error)));
  return out;
}

}  // namespace qload::session

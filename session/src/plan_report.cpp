#include "qload/session/plan_report.hpp"

#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "qload/io/digest.hpp"
#include "qload/session/lockfile.hpp"

namespace qload::session {
namespace {

using nlohmann::json;

std::string decode_kind(scheduler::DecodeJob::Kind kind) {
  switch (kind) {
    case scheduler::DecodeJob::Kind::kDequantize: return "dequantize";
    case scheduler::DecodeJob::Kind::kQuantize: return "quantize";
    case scheduler::DecodeJob::Kind::kRepack: return "repack";
    case scheduler::DecodeJob::Kind::kRequantize: return "requantize";
    case scheduler::DecodeJob::Kind::kContiguous: return "contiguous";
  }
  return "?";
}

json shape_json(const Shape& shape) {
  json out = json::array();
  for (std::size_t i = 0; i < shape.rank(); ++i) out.push_back(shape[i]);
  return out;
}

std::string device_of(const scheduler::Plan& plan, std::uint32_t region) {
  if (plan.mode == scheduler::LoadMode::kMmap) return "cpu";
  const scheduler::ArenaPlan& arena = plan.layout.arenas[region];
  return region == plan.copies.relay_region ? "relay" : arena.scratch ? "scratch" : arena.device.to_string();
}

// The plan hash's text: compact, nlohmann's escaping, invalid UTF-8 replaced.
std::string canonical(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

// The pieces of plan_json, built one at a time so plan_hash can stream a plan of millions of
// tensors without holding its whole document (a DOM costs kilobytes per tensor).
class PlanPieces {
 public:
  PlanPieces(const formats::Catalog& catalog, const scheduler::Plan& plan) : catalog_(catalog), plan_(plan) {
    for (const formats::CatalogFile& f : catalog.files) files_.push_back(path_in_checkpoint(catalog, f.path));
    consumed_by_.resize(catalog.tensors.size());
    for (const scheduler::DecodeJob& job : plan.decode.jobs)
      for (const std::uint32_t i : job.inputs) consumed_by_[i] = decode_kind(job.kind) + " " + job.outputs.front().name;
  }

  json arenas() const {
    json arenas = json::array();
    for (std::uint32_t r = 0; r < plan_.layout.arenas.size(); ++r)
      arenas.push_back({{"device", device_of(plan_, r)}, {"bytes", plan_.layout.arenas[r].bytes}});
    return arenas;
  }

  json decode(const scheduler::DecodeJob& job) const {
    json outputs = json::array();
    for (const scheduler::DecodeOutput& o : job.outputs)
      outputs.push_back({{"name", o.name},
                         {"dtype", std::string(dtype_name(o.dtype))},
                         {"shape", shape_json(o.shape)},
                         {"device", device_of(plan_, o.region)},
                         {"offset", o.offset},
                         {"bytes", o.bytes}});
    json inputs = json::array();
    for (const std::uint32_t i : job.inputs) inputs.push_back(catalog_.tensors[i].name);
    json entry = {{"kind", decode_kind(job.kind)}, {"inputs", inputs}, {"outputs", outputs}};
    if (job.kind == scheduler::DecodeJob::Kind::kQuantize || job.kind == scheduler::DecodeJob::Kind::kRequantize)
      entry["target"] = std::string(formats::quantize_target_name(job.target));
    if (job.kind == scheduler::DecodeJob::Kind::kRequantize) entry["through"] = std::string(dtype_name(job.through));
    return entry;
  }

  json tensor(std::size_t i) const {
    const formats::TensorEntry& t = catalog_.tensors[i];
    const scheduler::TensorPlacement& p = plan_.layout.tensors[i];
    json entry = {{"name", t.name},
                  {"dtype", std::string(dtype_name(t.dtype))},
                  {"shape", shape_json(t.shape)},
                  {"file", files_[t.file]},
                  {"file_offset", t.offset},
                  {"bytes", t.nbytes}};
    if (plan_.copies.shared_reads != scheduler::SharedReads::kNone &&
        (p.shard_count > 0 || p.region != scheduler::kNoRegion))
      entry["read_by_process"] = p.reader;  // the others holding it receive it
    if (!consumed_by_[i].empty()) {
      entry["decode"] = consumed_by_[i];
    } else if (p.shard_count > 0) {  // a parallel layout: one copy per device that holds it
      json shards = json::array();
      for (std::uint32_t k = p.first_shard; k < p.first_shard + p.shard_count; ++k) {
        const scheduler::ShardPlacement& shard = plan_.copies.shards[k];
        json rows = json::array();
        for (const auto& [first, last] : shard.slice.rows) rows.push_back({first, last});
        shards.push_back({{"device", device_of(plan_, shard.region)},
                          {"rank", shard.rank},
                          {"split", std::string(scheduler::split_name(shard.split))},
                          {"rows", rows},
                          {"cols", {shard.slice.col_begin, shard.slice.col_end}},
                          {"shape", shape_json(shard.slice.shape)},
                          {"offset", shard.offset},
                          {"dtype", std::string(dtype_name(shard.dtype))},
                          {"bytes", shard.bytes}});
        if (shard.slice.view_rows != 0) shards.back()["view_rows"] = shard.slice.view_rows;
      }
      entry["shards"] = std::move(shards);
    } else if (p.region != scheduler::kNoRegion) {
      entry["placed"] = {{"device", device_of(plan_, p.region)},
                         {"offset", p.offset},
                         {"dtype", std::string(dtype_name(p.dtype))},
                         {"bytes", p.bytes}};
    }
    return entry;
  }

  // canonical(tensor(i)) appended to `out` without building the document (the hot loop of a
  // plan hash: millions of entries). Keys in nlohmann's sorted order; strings through
  // nlohmann's own escaping; the rare shards list still goes through a document.
  void append_tensor(std::string& out, std::size_t i) const {
    const formats::TensorEntry& t = catalog_.tensors[i];
    const scheduler::TensorPlacement& p = plan_.layout.tensors[i];
    const auto number = [&](std::uint64_t v) { fmt::format_to(std::back_inserter(out), "{}", v); };
    const auto string = [&](std::string_view v) { out += canonical(json(v)); };
    const bool decoded = !consumed_by_[i].empty();
    const bool sharded = !decoded && p.shard_count > 0;
    const bool placed = !decoded && !sharded && p.region != scheduler::kNoRegion;
    out += "{\"bytes\":";
    number(t.nbytes);
    if (decoded) {
      out += ",\"decode\":";
      string(consumed_by_[i]);
    }
    out += ",\"dtype\":";
    string(dtype_name(t.dtype));
    out += ",\"file\":";
    string(files_[t.file]);
    out += ",\"file_offset\":";
    number(t.offset);
    out += ",\"name\":";
    string(t.name);
    if (placed) {
      out += ",\"placed\":{\"bytes\":";
      number(p.bytes);
      out += ",\"device\":";
      string(device_of(plan_, p.region));
      out += ",\"dtype\":";
      string(dtype_name(p.dtype));
      out += ",\"offset\":";
      number(p.offset);
      out += "}";
    }
    if (plan_.copies.shared_reads != scheduler::SharedReads::kNone &&
        (p.shard_count > 0 || p.region != scheduler::kNoRegion)) {
      out += ",\"read_by_process\":";
      number(p.reader);
    }
    out += ",\"shape\":[";
    for (std::size_t d = 0; d < t.shape.rank(); ++d) {
      if (d > 0) out += ",";
      number(t.shape[d]);
    }
    out += "]";
    if (sharded) {
      out += ",\"shards\":";
      out += canonical(tensor(i)["shards"]);
    }
    out += "}";
  }

  // The top level without its two long arrays: every key but "decodes" and "tensors".
  json head() const {
    return {{"schema", "qload.plan/1"},
            {"mode", std::string(scheduler::load_mode_name(plan_.mode))},
            {"tensor_alignment", plan_.layout.tensor_alignment},
            {"arenas", arenas()}};
  }

 private:
  const formats::Catalog& catalog_;
  const scheduler::Plan& plan_;
  std::vector<std::string> files_;        // each file's path in the checkpoint
  std::vector<std::string> consumed_by_;  // which decode job reads each stored tensor
};

}  // namespace

json plan_json(const formats::Catalog& catalog, const scheduler::Plan& plan) {
  const PlanPieces pieces(catalog, plan);
  json out = pieces.head();
  json decodes = json::array();
  for (const scheduler::DecodeJob& job : plan.decode.jobs) decodes.push_back(pieces.decode(job));
  json tensors = json::array();
  for (std::size_t i = 0; i < catalog.tensors.size(); ++i) tensors.push_back(pieces.tensor(i));
  out["decodes"] = std::move(decodes);
  out["tensors"] = std::move(tensors);
  return out;
}

void for_each_plan_entry(const formats::Catalog& catalog, const scheduler::Plan& plan,
                         const std::function<void(const json&)>& tensor,
                         const std::function<void(const json&)>& decode) {
  const PlanPieces pieces(catalog, plan);
  for (std::size_t i = 0; i < catalog.tensors.size(); ++i) tensor(pieces.tensor(i));
  for (const scheduler::DecodeJob& job : plan.decode.jobs) decode(pieces.decode(job));
}

std::uint64_t plan_hash(const json& plan) {
  const std::string text = canonical(plan);
  return io::xxh3_64(std::as_bytes(std::span(text)));
}

std::uint64_t plan_hash(const formats::Catalog& catalog, const scheduler::Plan& plan) {
  // Exactly the bytes of canonical(plan_json(...)): nlohmann orders object keys, so the top
  // level reads arenas, decodes, mode, schema, tensor_alignment, tensors. The head is dumped
  // with its "decodes" and "tensors" slots empty and the arrays streamed into those slots.
  const PlanPieces pieces(catalog, plan);
  json head = pieces.head();
  head["decodes"] = json::array();
  head["tensors"] = json::array();
  const std::string text = canonical(head);
  constexpr std::string_view kDecodes = "\"decodes\":[]";
  constexpr std::string_view kTensors = "\"tensors\":[]";
  const std::size_t decodes_at = text.find(kDecodes) + kDecodes.size() - 1;
  const std::size_t tensors_at = text.find(kTensors) + kTensors.size() - 1;
  io::Xxh3Stream hash;
  const auto feed = [&](std::string_view bytes) { hash.update(std::as_bytes(std::span(bytes))); };

  const std::string_view all(text);
  feed(all.substr(0, decodes_at));
  for (std::size_t i = 0; i < plan.decode.jobs.size(); ++i) {
    if (i > 0) feed(",");
    feed(canonical(pieces.decode(plan.decode.jobs[i])));
  }
  feed(all.substr(decodes_at, tensors_at - decodes_at));
  std::string entry;
  for (std::size_t i = 0; i < catalog.tensors.size(); ++i) {
    entry.clear();
    if (i > 0) entry += ",";
    pieces.append_tensor(entry, i);
    feed(entry);
  }
  feed(all.substr(tensors_at));
  return hash.digest64();
}

}  // namespace qload::session

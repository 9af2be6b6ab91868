#include "qload/session/plan_report.hpp"

#include <string>

#include "qload/io/digest.hpp"
#include "qload/scripts/lockfile.hpp"

namespace qload::session {
namespace {

using nlohmann::json;

std::string decode_kind(scheduler::DecodeJob::Kind kind) {
  switch (kind) {
    case scheduler::DecodeJob::Kind::kDequantize: return "dequantize";
    case scheduler::DecodeJob::Kind::kQuantize: return "quantize";
    case scheduler::DecodeJob::Kind::kRepack: return "repack";
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
  const scheduler::ArenaPlan& arena = plan.arenas[region];
  return arena.shared ? "relay" : arena.scratch ? "scratch" : arena.device.to_string();
}

}  // namespace

json plan_json(const formats::Catalog& catalog, const scheduler::Plan& plan) {
  json arenas = json::array();
  for (const scheduler::ArenaPlan& a : plan.arenas)
    arenas.push_back({{"device", a.shared    ? "relay"
                                 : a.scratch ? "scratch"
                                             : a.device.to_string()},
                      {"bytes", a.bytes}});
  // Which decode job reads each stored tensor.
  std::vector<std::string> consumed_by(catalog.tensors.size());
  json decodes = json::array();
  for (const scheduler::DecodeJob& job : plan.decodes) {
    json outputs = json::array();
    for (const scheduler::DecodeOutput& o : job.outputs)
      outputs.push_back({{"name", o.name},
                         {"dtype", std::string(dtype_name(o.dtype))},
                         {"shape", shape_json(o.shape)},
                         {"device", device_of(plan, o.region)},
                         {"offset", o.offset},
                         {"bytes", o.bytes}});
    json inputs = json::array();
    for (const std::uint32_t i : job.inputs) {
      inputs.push_back(catalog.tensors[i].name);
      consumed_by[i] = decode_kind(job.kind) + " " + job.outputs.front().name;
    }
    json entry = {{"kind", decode_kind(job.kind)}, {"inputs", inputs}, {"outputs", outputs}};
    if (job.kind == scheduler::DecodeJob::Kind::kQuantize)
      entry["target"] = std::string(formats::quantize_target_name(job.target));
    decodes.push_back(std::move(entry));
  }
  json tensors = json::array();
  for (std::size_t i = 0; i < catalog.tensors.size(); ++i) {
    const formats::TensorEntry& t = catalog.tensors[i];
    const scheduler::TensorPlacement& p = plan.tensors[i];
    json entry = {{"name", t.name},
                  {"dtype", std::string(dtype_name(t.dtype))},
                  {"shape", shape_json(t.shape)},
                  {"file", scripts::path_in_checkpoint(catalog, catalog.files[t.file].path)},
                  {"file_offset", t.offset},
                  {"bytes", t.nbytes}};
    if (plan.shared_reads != scheduler::SharedReads::kNone && (p.shard_count > 0 || p.region != scheduler::kNoRegion))
      entry["read_by_process"] = p.reader;  // the others holding it receive it
    if (!consumed_by[i].empty()) {
      entry["decode"] = consumed_by[i];
    } else if (p.shard_count > 0) {  // a parallel layout: one copy per device that holds it
      json shards = json::array();
      for (std::uint32_t k = p.first_shard; k < p.first_shard + p.shard_count; ++k) {
        const scheduler::ShardPlacement& shard = plan.shards[k];
        json rows = json::array();
        for (const auto& [first, last] : shard.slice.rows) rows.push_back({first, last});
        shards.push_back({{"device", device_of(plan, shard.region)},
                          {"rank", shard.rank},
                          {"split", std::string(scheduler::split_name(shard.split))},
                          {"rows", rows},
                          {"cols", {shard.slice.col_begin, shard.slice.col_end}},
                          {"shape", shape_json(shard.slice.shape)},
                          {"offset", shard.offset},
                          {"dtype", std::string(dtype_name(shard.dtype))},
                          {"bytes", shard.bytes}});
      }
      entry["shards"] = std::move(shards);
    } else if (p.region != scheduler::kNoRegion) {
      entry["placed"] = {{"device", device_of(plan, p.region)},
                         {"offset", p.offset},
                         {"dtype", std::string(dtype_name(p.dtype))},
                         {"bytes", p.bytes}};
    }
    tensors.push_back(std::move(entry));
  }
  return {{"schema", "qload.plan/1"},
          {"mode", std::string(scheduler::load_mode_name(plan.mode))},
          {"tensor_alignment", plan.tensor_alignment},
          {"arenas", arenas},
          {"tensors", tensors},
          {"decodes", decodes}};
}

std::uint64_t plan_hash(const json& plan) {
  const std::string text = plan.dump(-1, ' ', false, json::error_handler_t::replace);
  return io::xxh3_64(std::as_bytes(std::span(text)));
}

}  // namespace qload::session

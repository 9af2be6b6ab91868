// `qload convert SRC OUT [--dequantize T | --quantize Q] [--dtype T]`: loads SRC to host memory
// with the same decode policies as `qload load`, then writes OUT as a checkpoint other tools
// read: OUT/model.safetensors (atomically) and, when SRC has one, OUT/config.json with its
// quantization_config rewritten to describe what was written.
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "qload/formats/safetensors_writer.hpp"
#include "qload/runtime/units.hpp"

namespace qload::cli {
namespace {

using nlohmann::json;

std::string torch_dtype(DType d) {
  switch (d) {
    case DType::kBF16: return "bfloat16";
    case DType::kF16: return "float16";
    default: return "float32";
  }
}

// The quantization_config describing tensors quantized on load, in the convention whose
// tensor names qload writes (and reads back): HF "fp8" (per tensor; 128x128 blocks with
// weight_scale_inv), "fbgemm_fp8" (per row), compressed-tensors int-quantized (int8 per row).
json quantization_config(formats::QuantizeTarget target) {
  switch (target) {
    case formats::QuantizeTarget::kFp8Tensor:
      return {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"}};
    case formats::QuantizeTarget::kFp8Block:
      return {{"quant_method", "fp8"},
              {"fmt", "e4m3"},
              {"activation_scheme", "dynamic"},
              {"weight_block_size", {128, 128}}};
    case formats::QuantizeTarget::kFp8Row: return {{"quant_method", "fbgemm_fp8"}};
    case formats::QuantizeTarget::kInt8Row:
      return {{"quant_method", "compressed-tensors"},
              {"format", "int-quantized"},
              {"quantization_status", "compressed"},
              {"config_groups",
               {{"group_0",
                 {{"targets", {"Linear"}},
                  {"weights", {{"num_bits", 8}, {"type", "int"}, {"symmetric", true}, {"strategy", "channel"}}}}}}}};
  }
  return nullptr;
}

Status write_config(const std::string& source_config, const scheduler::LoadOptions& o, const std::string& path) {
  json config = json::parse(source_config, nullptr, false);
  if (config.is_discarded() || !config.is_object())
    return fail(Error(Errc::kCorrupt, "config.json is not a JSON object").with_file(path));
  if (o.plan.dequantize) config.erase("quantization_config");
  if (o.plan.quantize) config["quantization_config"] = quantization_config(*o.plan.quantize);
  if (const auto d = o.plan.dequantize ? o.plan.dequantize : o.plan.dtype) config["torch_dtype"] = torch_dtype(*d);
  std::ofstream out(path, std::ios::trunc);
  out << config.dump(2) << "\n";
  if (!out.flush()) return fail(Error(Errc::kIo, "cannot write").with_file(path));
  return {};
}

}  // namespace

int run_convert(const ConvertArgs& args) {
  LoadArgs load_args{.spec = {.source = args.source,
                              .devices = "cpu",
                              .dtype = args.dtype,
                              .dequantize = args.dequantize,
                              .quantize = args.quantize}};
  auto req = load_request(load_args);
  if (!req) return report(req.error());
  auto catalog = scheduler::open_source(req->source);
  if (!catalog) return report(catalog.error());
  auto model = scheduler::load(*catalog, req->options);
  if (!model) return report(model.error());
  std::error_code ec;
  std::filesystem::create_directories(args.out, ec);
  if (ec) return report(Error(Errc::kIo, "create directory: " + ec.message()).with_file(args.out));
  std::vector<formats::WriterTensor> tensors;
  for (const scheduler::DeviceTensor& t : model->tensors())
    tensors.push_back({t.name, t.dtype, t.shape, t.bytes(), {}});
  const std::string weights = (std::filesystem::path(args.out) / "model.safetensors").string();
  if (Status s = formats::write_safetensors(weights, tensors,
                                            {.metadata = {{"format", "pt"}, {"written_by", "qload convert"}}});
      !s)
    return report(s.error());
  if (!catalog->config_json.empty())
    if (Status s = write_config(catalog->config_json, req->options,
                                (std::filesystem::path(args.out) / "config.json").string());
        !s)
      return report(s.error());
  const scheduler::LoadReport& r = model->report();
  fmt::print("qload: wrote {} ({} tensors, {} decoded, {} converted) to {}\n", format_bytes(r.placed_bytes), r.tensors,
             r.decoded_tensors, r.converted_tensors, weights);
  return 0;
}

}  // namespace qload::cli

#include "qload/session/write.hpp"

#include <algorithm>
#include <array>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "qload/formats/safetensors_writer.hpp"
#include "qload/scheduler/load.hpp"

namespace qload::session {
namespace {

using nlohmann::json;

std::string torch_dtype(DType d) {
  switch (d) {
    case DType::kBF16: return "bfloat16";
    case DType::kF16: return "float16";
    default: return "float32";
  }
}

// The quantization_config describing tensors quantized on load, in a convention both qload
// and transformers read: compressed-tensors float-quantized (fp8 per tensor: transformers'
// own "fp8" method knows only 128x128 blocks and would take the raw fp8 values as weights),
// HF "fp8" with weight_block_size (128x128 blocks, weight_scale_inv), "fbgemm_fp8" (per row,
// with transformers' default activation bound: vLLM refuses the config without one),
// compressed-tensors pack-quantized (int8 per row: the weight-only W8A16 layout llmcompressor
// writes; vLLM reads "int-quantized" as W8A8 and refuses it without activation quantization).
// `unquantized` names the Linear-shaped
// modules left as they were (lm_head, a recipe's exceptions): compressed-tensors quantizes
// every Linear not in "ignore", and transformers' fp8 methods every one not in
// "modules_to_not_convert".
// transformers' FbgemmFp8Config default.
constexpr double kFbgemmActivationScaleUb = 1200.0;

json quantization_config(formats::QuantizeTarget target, const std::vector<std::string>& unquantized) {
  const auto compressed_tensors = [&](const char* format, const char* type, const char* strategy) {
    return json{
        {"quant_method", "compressed-tensors"},
        {"format", format},
        {"quantization_status", "compressed"},
        {"ignore", unquantized},
        {"config_groups",
         {{"group_0",
           {{"targets", {"Linear"}},
            {"weights",
             {{"num_bits", 8}, {"type", type}, {"symmetric", true}, {"strategy", strategy}, {"dynamic", false}}},
            {"input_activations", nullptr}}}}}};
  };
  switch (target) {
    case formats::QuantizeTarget::kFp8Tensor: return compressed_tensors("float-quantized", "float", "tensor");
    case formats::QuantizeTarget::kFp8Block:
      return {{"quant_method", "fp8"},
              {"fmt", "e4m3"},
              {"activation_scheme", "dynamic"},
              {"weight_block_size", {128, 128}},
              {"modules_to_not_convert", unquantized}};
    case formats::QuantizeTarget::kFp8Row:
      return {{"quant_method", "fbgemm_fp8"},
              {"activation_scale_ub", kFbgemmActivationScaleUb},
              {"modules_to_not_convert", unquantized}};
    case formats::QuantizeTarget::kInt8Row: return compressed_tensors("pack-quantized", "int", "channel");
  }
  return nullptr;
}

// Modules whose 2-D floating ".weight" was written as it was, with no scale beside it.
std::vector<std::string> unquantized_modules(const scheduler::Model& model) {
  std::vector<std::string> out;
  for (const scheduler::DeviceTensor& t : model.tensors()) {
    const bool wide_float = t.dtype == DType::kF32 || t.dtype == DType::kBF16 || t.dtype == DType::kF16;
    if (!t.name.ends_with(".weight") || t.shape.rank() != 2 || !wide_float) continue;
    const std::string module = t.name.substr(0, t.name.size() - std::string_view(".weight").size());
    if (model.find(module + ".weight_scale") || model.find(module + ".weight_scale_inv")) continue;
    out.push_back(module);
  }
  return out;
}

Status write_config(const std::string& source_config, const scheduler::LoadOptions& o,
                    const std::vector<std::string>& unquantized, const std::string& path) {
  json config = json::parse(source_config, nullptr, false);
  if (config.is_discarded() || !config.is_object())
    return fail(Error(Errc::kCorrupt, "config.json is not a JSON object").with_file(path));
  if (o.plan.dequantize) config.erase("quantization_config");
  if (o.plan.quantize) config["quantization_config"] = quantization_config(*o.plan.quantize, unquantized);
  if (const auto d = o.plan.dequantize ? o.plan.dequantize : o.plan.dtype) config["torch_dtype"] = torch_dtype(*d);
  std::ofstream out(path, std::ios::trunc);
  out << config.dump(2) << "\n";
  if (!out.flush()) return fail(Error(Errc::kIo, "cannot write").with_file(path));
  return {};
}

// An int8 weight [N, K] as compressed-tensors pack-quantized stores it: `weight_packed` I32
// [N, ceil(K / 4)], each value plus 128 in one byte, four to a little-endian word, the last
// word of a row zero-padded; and `weight_shape` I64 [N, K]. Written from the int8 bytes as the
// file is written, so no second copy is held.
struct PackedInt8 {
  std::array<std::int64_t, 2> shape{};
  formats::WriterTensor packed, weight_shape;
};

PackedInt8 pack_int8(const scheduler::DeviceTensor& weight, std::string_view module) {
  const std::uint64_t rows = weight.shape[0], cols = weight.shape[1], words = (cols + 3) / 4;
  const std::span<const std::byte> in = weight.bytes();
  PackedInt8 out;
  out.shape = {static_cast<std::int64_t>(rows), static_cast<std::int64_t>(cols)};
  out.packed = {std::string(module) + ".weight_packed", DType::kI32, Shape{rows, words}, {}, {}};
  out.packed.fill = [in, cols, row_bytes = words * 4](std::uint64_t offset, std::span<std::byte> chunk) -> Status {
    for (std::size_t i = 0; i < chunk.size();) {  // one row's piece at a time
      const std::uint64_t row = (offset + i) / row_bytes, col = (offset + i) % row_bytes;
      const std::size_t n = std::min<std::uint64_t>(row_bytes - col, chunk.size() - i);
      const std::size_t values = col < cols ? std::min<std::uint64_t>(cols - col, n) : 0;
      const std::byte* from = in.data() + row * cols + col;
      for (std::size_t j = 0; j < values; ++j) chunk[i + j] = from[j] ^ std::byte{0x80};
      std::fill_n(chunk.begin() + static_cast<std::ptrdiff_t>(i + values), n - values, std::byte{0});
      i += n;
    }
    return {};
  };
  out.weight_shape = {std::string(module) + ".weight_shape", DType::kI64, Shape{2}, {}, {}};
  return out;
}

Status create_directory(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return fail(Error(Errc::kIo, "create directory: " + ec.message()).with_file(dir));
  return {};
}

// GGML blocks written to safetensors as bytes would be a checkpoint no reader understands.
Status check_no_raw_ggml_blocks(const scheduler::Plan& plan) {
  if (!plan.decode.quant) return {};
  for (std::uint32_t l = 0; l < plan.decode.quant->logical.size(); ++l) {
    const formats::LogicalTensor& lt = plan.decode.quant->logical[l];
    if (lt.params.scheme != formats::QuantScheme::kGgml) continue;
    const bool decoded = std::ranges::any_of(plan.decode.jobs, [&](const scheduler::DecodeJob& job) {
      return (job.kind == scheduler::DecodeJob::Kind::kDequantize ||
              job.kind == scheduler::DecodeJob::Kind::kRequantize) &&
             job.logical == l;
    });
    if (!decoded)
      return fail(Error(Errc::kUnsupported,
                        fmt::format("{} blocks have no safetensors form: convert with --dequantize bf16 (or f16, f32), "
                                    "adding --quantize to requantize",
                                    formats::weight_scheme_name(lt.params)))
                      .with_tensor(lt.name));
  }
  return {};
}

}  // namespace

Status dump(const scheduler::Model& model, const std::string& dir, const std::string& prefix) {
  QLOAD_TRY(create_directory(dir));
  std::map<std::string, std::vector<formats::WriterTensor>> by_device;
  for (const scheduler::DeviceTensor& t : model.tensors()) {
    formats::WriterTensor w{t.name, t.dtype, t.shape, t.bytes(), {}};
    if (!t.host) {
      w.fill = [&model, &t](std::uint64_t offset, std::span<std::byte> out) {
        return model.copy_to_host(t, offset, out);
      };
    }
    by_device[t.device].push_back(std::move(w));
  }
  for (auto& [device, tensors] : by_device)
    QLOAD_TRY(formats::write_safetensors((std::filesystem::path(dir) / (prefix + device + ".safetensors")).string(),
                                         tensors, {.metadata = {{"written_by", "qload load --dump"}}}));
  return {};
}

Result<Converted> convert(const LoadSpec& spec, const std::string& out, const Logger& log) {
  QLOAD_ASSIGN_OR_RETURN(LoadRequest request, build_request(spec, log));
  QLOAD_ASSIGN_OR_RETURN(const PlannedLoad planned, prepare(std::move(request)));
  QLOAD_TRY(check_no_raw_ggml_blocks(planned.plan));
  QLOAD_ASSIGN_OR_RETURN(const scheduler::Model model,
                         scheduler::load(planned.catalog, planned.plan, planned.request.options));
  QLOAD_TRY(create_directory(out));
  // Int8 weights with their per-row scale go out pack-quantized (quantization_config's layout).
  const bool pack = planned.request.options.plan.quantize == formats::QuantizeTarget::kInt8Row;
  std::deque<PackedInt8> packed;  // owns the shapes the writer's spans point at
  std::vector<formats::WriterTensor> tensors;
  for (const scheduler::DeviceTensor& t : model.tensors()) {
    const std::string_view module = std::string_view(t.name).substr(0, t.name.size() - 7);
    if (pack && t.dtype == DType::kI8 && t.shape.rank() == 2 && t.name.ends_with(".weight") &&
        model.find(std::string(module) + ".weight_scale")) {
      PackedInt8& p = packed.emplace_back(pack_int8(t, module));
      p.weight_shape.bytes = std::as_bytes(std::span(p.shape));
      tensors.push_back(std::move(p.packed));
      tensors.push_back(std::move(p.weight_shape));
      continue;
    }
    tensors.push_back({t.name, t.dtype, t.shape, t.bytes(), {}});
  }
  Converted converted{.report = model.report(), .weights = (std::filesystem::path(out) / "model.safetensors").string()};
  QLOAD_TRY(formats::write_safetensors(converted.weights, tensors,
                                       {.metadata = {{"format", "pt"}, {"written_by", "qload convert"}}}));
  // A source without a config.json (a GGUF file, a bare safetensors file) gets one when the
  // output is quantized: without its quantization_config the scales would mean nothing.
  const bool quantized = planned.request.options.plan.quantize.has_value();
  if (!planned.catalog.config_json.empty() || quantized)
    QLOAD_TRY(write_config(planned.catalog.config_json.empty() ? "{}" : planned.catalog.config_json,
                           planned.request.options, unquantized_modules(model),
                           (std::filesystem::path(out) / "config.json").string()));
  return converted;
}

}  // namespace qload::session

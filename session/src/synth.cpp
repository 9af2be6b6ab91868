#include "qload/session/synth.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "qload/formats/safetensors_writer.hpp"
#include "qload/runtime/shape.hpp"
#include "synth_quant.hpp"

namespace qload::session {
namespace {

using detail::mix;

struct SynthTensor {
  std::string name;
  Shape shape;
};

std::vector<SynthTensor> llama_tensors(const SynthOptions& o) {
  const std::uint64_t h = o.hidden, i = o.intermediate, kv = std::uint64_t{o.hidden} / o.heads * o.kv_heads;
  std::vector<SynthTensor> out{{"model.embed_tokens.weight", Shape{o.vocab, h}}};
  for (std::uint32_t l = 0; l < o.layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    out.push_back({p + "input_layernorm.weight", Shape{h}});
    out.push_back({p + "self_attn.q_proj.weight", Shape{h, h}});
    out.push_back({p + "self_attn.k_proj.weight", Shape{kv, h}});
    out.push_back({p + "self_attn.v_proj.weight", Shape{kv, h}});
    out.push_back({p + "self_attn.o_proj.weight", Shape{h, h}});
    out.push_back({p + "post_attention_layernorm.weight", Shape{h}});
    out.push_back({p + "mlp.gate_proj.weight", Shape{i, h}});
    out.push_back({p + "mlp.up_proj.weight", Shape{i, h}});
    out.push_back({p + "mlp.down_proj.weight", Shape{h, i}});
  }
  out.push_back({"model.norm.weight", Shape{h}});
  out.push_back({"lm_head.weight", Shape{o.vocab, h}});
  return out;
}

// A finite float of magnitude in [2^-7, 2^-1) with random sign and mantissa, built directly as
// bits of the target format (no conversion code, no NaN or Inf).
void write_element(DType dtype, std::uint64_t r, std::byte* out) {
  const std::uint32_t sign = r & 1, exp_offset = (r >> 1) % 6;
  if (dtype == DType::kF32) {
    const std::uint32_t bits = sign << 31 | (125 - exp_offset) << 23 | (static_cast<std::uint32_t>(r >> 8) & 0x7fffff);
    std::memcpy(out, &bits, 4);
  } else {
    const std::uint16_t bits =
        dtype == DType::kBF16 ? static_cast<std::uint16_t>(sign << 15 | (125 - exp_offset) << 7 | ((r >> 8) & 0x7f))
                              : static_cast<std::uint16_t>(sign << 15 | (13 - exp_offset) << 10 | ((r >> 8) & 0x3ff));
    std::memcpy(out, &bits, 2);
  }
}

formats::TensorFill filler(DType dtype, std::uint64_t stream) {
  const std::uint32_t size = dtype == DType::kF32 ? 4 : 2;
  return [dtype, stream, size](std::uint64_t offset, std::span<std::byte> out) -> Status {
    // Chunks start at multiples of the writer's chunk size, so they are element-aligned.
    for (std::size_t k = 0; k + size <= out.size(); k += size)
      write_element(dtype, mix(stream ^ mix((offset + k) / size)), out.data() + k);
    return {};
  };
}

std::string config_json(const SynthOptions& o) {
  nlohmann::json config = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_size", o.hidden},
      {"intermediate_size", o.intermediate},
      {"num_hidden_layers", o.layers},
      {"num_attention_heads", o.heads},
      {"num_key_value_heads", o.kv_heads},
      {"vocab_size", o.vocab},
      {"max_position_embeddings", 4096},
      {"rms_norm_eps", 1e-5},
      {"tie_word_embeddings", false},
      {"torch_dtype", o.dtype == DType::kBF16  ? "bfloat16"
                      : o.dtype == DType::kF16 ? "float16"
                                               : "float32"},
      {"qload_synth", {{"seed", o.seed}}},
  };
  if (!o.quant.empty()) config["quantization_config"] = detail::quantization_config(o);
  return config.dump(2) + "\n";
}

Status write_text(const std::filesystem::path& path, const std::string& text) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) return fail(Error(Errc::kIo, "writing failed").with_file(tmp.string()));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return fail(Error(Errc::kIo, "rename: " + ec.message()).with_file(path.string()));
  return {};
}

// Every stored tensor in file order: the llama tensors, each quantized linear weight replaced by
// its parts. A tensor's values depend on its index in llama_tensors, so with and without
// quantization the unquantized weights are the same.
Result<std::vector<formats::WriterTensor>> stored_tensors(const SynthOptions& o) {
  const std::vector<SynthTensor> tensors = llama_tensors(o);
  std::vector<formats::WriterTensor> all;
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    const std::uint64_t stream = mix(o.seed) ^ t;
    if (o.quant.empty() || !detail::is_quantized_linear(tensors[t].name)) {
      all.push_back({tensors[t].name, o.dtype, tensors[t].shape, {}, filler(o.dtype, stream)});
      continue;
    }
    QLOAD_ASSIGN_OR_RETURN(
        std::vector<formats::WriterTensor> parts,
        detail::quantized_parts(o, tensors[t].name, tensors[t].shape, stream, filler(o.dtype, stream)));
    for (formats::WriterTensor& part : parts) all.push_back(std::move(part));
  }
  return all;
}

}  // namespace

Status validate(const SynthOptions& o) {
  if (o.dtype != DType::kBF16 && o.dtype != DType::kF16 && o.dtype != DType::kF32)
    return fail(Errc::kInvalidArgument, "synth dtype must be bf16, f16 or f32");
  if (o.hidden == 0 || o.intermediate == 0 || o.vocab == 0 || o.heads == 0 || o.kv_heads == 0 || o.shards == 0)
    return fail(Errc::kInvalidArgument, "synth sizes, heads and shards must be positive");
  if (o.hidden % o.heads != 0 || o.heads % o.kv_heads != 0)
    return fail(Errc::kInvalidArgument, fmt::format("hidden ({}) must divide by heads ({}), and heads by kv-heads ({})",
                                                    o.hidden, o.heads, o.kv_heads));
  if (o.shards > 2 * o.layers + 2)
    return fail(Errc::kInvalidArgument, fmt::format("{} shards is more than the model has tensors to fill", o.shards));
  return detail::validate_quant(o);
}

Result<SynthReport> synthesize(const std::string& out, const SynthOptions& o) {
  QLOAD_TRY(validate(o));
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) return fail(Error(Errc::kIo, "create directory: " + ec.message()).with_file(out));

  QLOAD_ASSIGN_OR_RETURN(const std::vector<formats::WriterTensor> all, stored_tensors(o));
  std::vector<std::uint64_t> sizes;
  std::uint64_t total = 0;
  for (const formats::WriterTensor& t : all) {
    QLOAD_ASSIGN_OR_RETURN(const std::uint64_t bytes, t.shape.nbytes(t.dtype));
    sizes.push_back(bytes);
    total += bytes;
  }
  // Shards split the tensors in order at (roughly) equal byte counts, as HF exports do.
  SynthReport report{all.size(), total, o.shards};
  nlohmann::json weight_map = nlohmann::json::object();
  std::size_t next = 0;
  std::uint64_t written = 0;
  for (std::uint32_t s = 0; s < o.shards; ++s) {
    const std::string name =
        o.shards == 1 ? "model.safetensors" : fmt::format("model-{:05}-of-{:05}.safetensors", s + 1, o.shards);
    const std::uint64_t target = total * (s + 1) / o.shards;
    const std::size_t begin = next;
    while (next < all.size() && (next == begin || written < target) && all.size() - next > o.shards - s - 1) {
      written += sizes[next];
      weight_map[all[next].name] = name;
      ++next;
    }
    if (s + 1 == o.shards)
      for (; next < all.size(); ++next) weight_map[all[next].name] = name;
    const std::span<const formats::WriterTensor> shard(all.data() + begin, next - begin);
    QLOAD_TRY(formats::write_safetensors((std::filesystem::path(out) / name).string(), shard,
                                         {.metadata = {{"format", "pt"}}}));
  }
  QLOAD_TRY(write_text(std::filesystem::path(out) / "config.json", config_json(o)));
  if (o.shards > 1) {
    const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    QLOAD_TRY(write_text(std::filesystem::path(out) / "model.safetensors.index.json", index.dump(2) + "\n"));
  }
  return report;
}

}  // namespace qload::session

// A server that allocates its own parameters and has qload fill them (qload_load_into): the
// parameter table of a llama-shaped model comes from its config.json, as a server builds its
// model; q/k/v are one fused parameter and gate/up another, each checkpoint tensor read
// straight into its part at an offset; nothing else is allocated for the weights. Prints each
// checkpoint tensor as name, dtype and a 64-bit FNV-1a of its bytes where it landed (the same
// lines as examples/embed-c, so the two can be compared).
//
//   c++ -std=c++17 main.cpp $(pkg-config --cflags --libs qload)   or   find_package(qload)
//   ./embed_into LLAMA_CHECKPOINT_DIRECTORY      (bf16, as `qload synth` writes)
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <qload/qload.h>

namespace {

struct Free {
  void operator()(qload_session* s) const { qload_session_free(s); }
};

void check(qload_status status, const char* what) {
  if (status != QLOAD_OK) throw std::runtime_error(std::string(what) + ": " + qload_last_error());
}

std::uint64_t fnv1a(const unsigned char* p, std::size_t n) {
  std::uint64_t h = 14695981039346656037ull;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// The integer after "key": in config.json (a server would use its JSON library).
std::int64_t config_value(const std::string& json, const std::string& key) {
  const std::size_t at = json.find("\"" + key + "\"");
  if (at == std::string::npos) throw std::runtime_error("config.json has no " + key);
  return std::stoll(json.substr(json.find(':', at) + 1));
}

// One parameter of the server's model: bf16 host memory it owns.
struct Parameter {
  std::vector<std::int64_t> shape;
  std::unique_ptr<std::uint16_t[]> data;
  std::size_t elements = 1;
};

// A checkpoint tensor's place: `rows` rows of `cols` starting `row_offset` rows into a parameter.
struct Part {
  std::string parameter;
  std::int64_t row_offset, rows, cols;
};

// The server's model: its parameters, allocated once, and where each checkpoint tensor goes.
struct Model {
  std::map<std::string, Parameter> parameters;
  std::map<std::string, Part> parts;

  void add(const std::string& name, std::vector<std::int64_t> shape) {
    Parameter p{std::move(shape), nullptr, 1};
    for (const std::int64_t d : p.shape) p.elements *= static_cast<std::size_t>(d);
    p.data = std::make_unique<std::uint16_t[]>(p.elements);
    parameters.emplace(name, std::move(p));
  }
  void place(const std::string& tensor, const std::string& parameter, std::int64_t row_offset, std::int64_t rows,
             std::int64_t cols) {
    parts[tensor] = {parameter, row_offset, rows, cols};
  }
};

// A llama's parameter table from its config.json: q/k/v fused into one parameter, gate/up into
// another.
Model llama_from_config(const std::string& directory) {
  std::ifstream file(directory + "/config.json");
  std::stringstream text;
  text << file.rdbuf();
  const std::string config = text.str();
  const std::int64_t hidden = config_value(config, "hidden_size"), inter = config_value(config, "intermediate_size"),
                     layers = config_value(config, "num_hidden_layers"), vocab = config_value(config, "vocab_size"),
                     heads = config_value(config, "num_attention_heads"),
                     kv = config_value(config, "num_key_value_heads"), head_dim = hidden / heads;
  Model m;
  m.add("embed", {vocab, hidden});
  m.place("model.embed_tokens.weight", "embed", 0, vocab, hidden);
  for (std::int64_t l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".", s = "layer" + std::to_string(l) + ".";
    m.add(s + "qkv", {(heads + 2 * kv) * head_dim, hidden});
    m.place(p + "self_attn.q_proj.weight", s + "qkv", 0, heads * head_dim, hidden);
    m.place(p + "self_attn.k_proj.weight", s + "qkv", heads * head_dim, kv * head_dim, hidden);
    m.place(p + "self_attn.v_proj.weight", s + "qkv", (heads + kv) * head_dim, kv * head_dim, hidden);
    m.add(s + "o", {hidden, hidden});
    m.place(p + "self_attn.o_proj.weight", s + "o", 0, hidden, hidden);
    m.add(s + "gate_up", {2 * inter, hidden});
    m.place(p + "mlp.gate_proj.weight", s + "gate_up", 0, inter, hidden);
    m.place(p + "mlp.up_proj.weight", s + "gate_up", inter, inter, hidden);
    m.add(s + "down", {hidden, inter});
    m.place(p + "mlp.down_proj.weight", s + "down", 0, hidden, inter);
    m.add(s + "ln1", {hidden});
    m.place(p + "input_layernorm.weight", s + "ln1", 0, hidden, 1);
    m.add(s + "ln2", {hidden});
    m.place(p + "post_attention_layernorm.weight", s + "ln2", 0, hidden, 1);
  }
  m.add("norm", {hidden});
  m.place("model.norm.weight", "norm", 0, hidden, 1);
  m.add("lm_head", {vocab, hidden});
  m.place("lm_head.weight", "lm_head", 0, vocab, hidden);
  return m;
}

// One destination per checkpoint tensor: a DLTensor over its part of the parameter, its shape
// in `shapes` (which must outlive the destinations).
std::vector<qload_destination> destinations_of(Model& m, std::vector<std::vector<std::int64_t>>& shapes) {
  std::vector<qload_destination> destinations;
  shapes.reserve(m.parts.size());  // the DLTensors point at these
  for (const auto& [tensor, part] : m.parts) {
    Parameter& p = m.parameters.at(part.parameter);
    shapes.push_back(p.shape.size() == 1 ? std::vector<std::int64_t>{part.rows}
                                         : std::vector<std::int64_t>{part.rows, part.cols});
    qload_destination d{};
    d.tensor = tensor.c_str();
    d.target.data = p.data.get();
    d.target.byte_offset = static_cast<std::uint64_t>(part.row_offset * part.cols) * 2;
    d.target.device = {kDLCPU, 0};
    d.target.ndim = static_cast<std::int32_t>(shapes.back().size());
    d.target.dtype = {kDLBfloat, 16, 1};
    d.target.shape = shapes.back().data();
    d.region_dim = -1;
    destinations.push_back(d);
  }
  return destinations;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::fprintf(stderr, "usage: embed_into LLAMA_CHECKPOINT_DIRECTORY\n");
    return 2;
  }
  Model model = llama_from_config(argv[1]);
  std::vector<std::vector<std::int64_t>> shapes;
  std::vector<qload_destination> destinations = destinations_of(model, shapes);
  qload_session* raw = nullptr;
  check(qload_open(argv[1], nullptr, &raw), "open");
  std::unique_ptr<qload_session, Free> session(raw);
  // rest NULL: the checkpoint's other tensors (none here) are not read.
  check(qload_load_into(session.get(), destinations.data(), destinations.size(), nullptr), "load_into");

  for (const auto& [tensor, part] : model.parts) {
    const Parameter& p = model.parameters.at(part.parameter);
    const auto* bytes = reinterpret_cast<const unsigned char*>(p.data.get() + part.row_offset * part.cols);
    std::printf("%s BF16 %016llx\n", tensor.c_str(),
                static_cast<unsigned long long>(fnv1a(bytes, static_cast<std::size_t>(part.rows * part.cols) * 2)));
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "embed_into: %s\n", e.what());
  return 1;
}

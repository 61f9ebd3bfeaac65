#include "bert_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <mutex>
#include <stdexcept>

#include <boost/dll/shared_library.hpp>

#include "masque/plugin.hpp"
#include "masque/safetensors.hpp"
#include "test_support.hpp"

namespace bert_test {

namespace fs = std::filesystem;
using masque::ParamType;
using masque::ParamValue;

namespace {

// A declared default as the host parses it (these plugins' defaults are plain scalars).
ParamValue parse_default(const masque::ParamSpec& spec) {
  const std::string text = spec.default_value ? spec.default_value : "";
  switch (spec.type) {
    case ParamType::boolean:
      return text == "true";
    case ParamType::integer:
      return static_cast<std::int64_t>(std::stoll(text));
    case ParamType::number:
      return std::stod(text);
    case ParamType::int_list:
      return std::vector<std::int64_t>{};
    case ParamType::string_list:
      return std::vector<std::string>{};
    case ParamType::string:
    case ParamType::path:
      return text;
  }
  return text;
}

masque::Params make_params(const masque::PluginDescriptor& d,
                           const std::map<std::string, ParamValue>& overrides) {
  masque::Params params;
  for (std::uint32_t i = 0; i < d.num_params; ++i) {
    const masque::ParamSpec& spec = d.params[i];
    auto it = overrides.find(spec.name);
    if (it != overrides.end())
      params.set(spec.name, it->second);
    else if (spec.flags & masque::kParamRequired)
      throw std::runtime_error(std::string(d.name) + ": required parameter " + spec.name);
    else
      params.set(spec.name, parse_default(spec));
  }
  for (const auto& [name, value] : overrides)
    if (!params.has(name))
      throw std::runtime_error(std::string(d.name) + " has no parameter " + name);
  return params;
}

// Libraries stay loaded until the process ends, as in the host: an exception thrown by plugin
// code (its vtable lives in the library) must outlive a failed create().
std::shared_ptr<boost::dll::shared_library> open_library(const fs::path& file) {
  static std::mutex mutex;
  static auto* loaded = new std::map<fs::path, std::shared_ptr<boost::dll::shared_library>>();
  std::lock_guard lock(mutex);
  auto& library = (*loaded)[file];
  if (!library) library = std::make_shared<boost::dll::shared_library>(file.string());
  return library;
}

template <typename T>
Loaded<T> load_plugin(const std::string& kind, const std::string& name,
                      const std::map<std::string, ParamValue>& overrides) {
  const fs::path file =
      fs::path(MASQUE_BUILD_PLUGIN_DIR) / ("libmasque-" + kind + "-" + name + ".so");
  const auto library = open_library(file);
  auto get = library->get_alias<const masque::PluginDescriptor*()>(MASQUE_PLUGIN_SYMBOL);
  const masque::PluginDescriptor* d = get();
  if (!d || d->magic != masque::kDescriptorMagic || masque::to_string(d->kind) != kind)
    throw std::runtime_error(file.string() + " is not a masque " + kind + " plugin");
  std::unique_ptr<masque::Plugin> plugin(d->create(make_params(*d, overrides)));
  auto* object = dynamic_cast<T*>(plugin.get());
  if (!object) throw std::runtime_error(file.string() + " created the wrong kind of object");
  plugin.release();
  return {std::move(library), std::unique_ptr<T>(object)};
}

}  // namespace

Loaded<masque::Model> load_model(const fs::path& folder,
                                 const std::map<std::string, ParamValue>& extra) {
  auto params = extra;
  params["path"] = folder.string();
  return load_plugin<masque::Model>("model", "bert", params);
}

Loaded<masque::MaskStrategy> load_mask(const std::string& name,
                                       const std::map<std::string, ParamValue>& params) {
  return load_plugin<masque::MaskStrategy>("mask", name, params);
}

fs::path model_dir(const std::string& model) {
  return masque::test::shared_dir() / "models" / model;
}

const nlohmann::json& reference(const std::string& model) {
  static std::mutex mutex;
  static std::map<std::string, nlohmann::json> cache;
  std::lock_guard lock(mutex);
  auto it = cache.find(model);
  if (it == cache.end())
    it = cache
             .emplace(model, nlohmann::json::parse(
                                 masque::test::read_file(model_dir(model) / "reference.json")))
             .first;
  return it->second;
}

masque::AttentionLayout one_row_layout(const masque::SequenceMask& mask, std::int32_t length) {
  masque::AttentionLayout layout;
  layout.reset(1, length);
  layout.set_row(0, mask);
  return layout;
}

masque::SequenceMask build_mask(const masque::MaskStrategy& strategy, std::int32_t length,
                                std::vector<std::int32_t> segments,
                                std::vector<std::int32_t> order) {
  masque::MaskRequest request;
  request.length = length;
  request.segments = segments;
  request.order = order;
  return strategy.build(request);
}

std::vector<std::int32_t> ints(const nlohmann::json& j) {
  return j.get<std::vector<std::int32_t>>();
}

masque::AttentionLayout reference_layout(const std::string& name, const nlohmann::json& entry,
                                         std::int32_t length, std::int32_t real) {
  auto strategy = load_mask(name);
  std::vector<std::int32_t> segments, order;
  if (name == "seq2seq") segments = ints(entry["segment_ids"]);
  if (name == "permutation") order = ints(entry["order"]);
  return one_row_layout(build_mask(*strategy, real, segments, order), length);
}

masque::Batch reference_batch(const nlohmann::json& ref, const std::string& name,
                              masque::AttentionLayout layout) {
  const nlohmann::json& input = ref["input"];
  masque::Batch batch;
  batch.batch = 1;
  batch.length = input["length"];
  batch.ids = ints(input["input_ids"]);
  batch.positions = ints(input["position_ids"]);
  batch.token_types = ints(ref["masks"][name]["token_type_ids"]);
  batch.attention = std::move(layout);
  batch.want_hidden = true;
  return batch;
}

ReferenceErrors reference_errors(const masque::ForwardResult& out, const nlohmann::json& ref,
                                 const std::string& name, std::int32_t vocab,
                                 std::int32_t hidden_size) {
  const nlohmann::json& entry = ref["masks"][name];
  ReferenceErrors err;
  for (const auto& pos : entry["positions"]) {
    if (pos["is_pad"].get<bool>()) continue;  // pad queries see nothing in masque's layouts
    const float* logits = out.logits.f32() + pos["position"].get<std::size_t>() * vocab;
    const auto ids = ints(pos["top10_ids"]);
    for (std::size_t k = 0; k < ids.size(); ++k)
      err.logits =
          std::max(err.logits, std::abs(logits[ids[k]] - pos["top10_logits"][k].get<double>()));
    err.logsumexp = std::max(err.logsumexp,
                             std::abs(logsumexp(logits, vocab) - pos["logsumexp"].get<double>()));
  }
  const auto& hs = entry["hidden_states"];
  for (std::size_t k = 0; k < hs["positions"].size(); ++k) {
    const float* row = out.hidden.f32() + hs["positions"][k].get<std::size_t>() * hidden_size;
    for (std::int32_t c = 0; c < hidden_size; ++c)
      err.hidden = std::max(err.hidden, std::abs(row[c] - hs["values"][k][c].get<double>()));
  }
  return err;
}

// ---- float64 reference ----------------------------------------------------------------------

namespace {

using Matrix = std::vector<std::vector<double>>;

struct DoubleWeights {
  TensorMap tensors;
  std::string prefix;
  const StoredTensor& get(const std::string& name) const {
    auto it = tensors.find(name);
    if (it == tensors.end()) it = tensors.find(prefix + name);
    if (it == tensors.end()) throw std::runtime_error("double_forward: no tensor " + name);
    return it->second;
  }
};

// y = x W^T + b, W stored [out, in].
Matrix linear(const Matrix& x, const StoredTensor& w, const StoredTensor& b) {
  const std::size_t out = w.shape[0], in = w.shape[1];
  Matrix y(x.size(), std::vector<double>(out));
  for (std::size_t t = 0; t < x.size(); ++t)
    for (std::size_t o = 0; o < out; ++o) {
      double s = b.data[o];
      for (std::size_t i = 0; i < in; ++i) s += x[t][i] * static_cast<double>(w.data[o * in + i]);
      y[t][o] = s;
    }
  return y;
}

void layer_norm(Matrix& x, const StoredTensor& w, const StoredTensor& b, double eps) {
  for (auto& row : x) {
    double mean = 0, var = 0;
    for (double v : row) mean += v;
    mean /= static_cast<double>(row.size());
    for (double v : row) var += (v - mean) * (v - mean);
    var /= static_cast<double>(row.size());
    for (std::size_t i = 0; i < row.size(); ++i)
      row[i] = (row[i] - mean) / std::sqrt(var + eps) * w.data[i] + b.data[i];
  }
}

void activate(Matrix& x, const std::string& act) {
  for (auto& row : x)
    for (double& v : row) {
      if (act == "gelu")
        v = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
      else if (act == "gelu_new")
        v = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
      else if (act == "relu")
        v = std::max(v, 0.0);
      else
        throw std::runtime_error("double_forward: activation " + act);
    }
}

void add(Matrix& y, const Matrix& x) {
  for (std::size_t t = 0; t < y.size(); ++t)
    for (std::size_t i = 0; i < y[t].size(); ++i) y[t][i] += x[t][i];
}

Matrix attention(const Matrix& q, const Matrix& k, const Matrix& v, int heads,
                 const std::vector<std::vector<int>>& allowed) {
  const std::size_t n = q.size(), width = q[0].size(), d = width / heads;
  Matrix out(n, std::vector<double>(width, 0.0));
  for (int h = 0; h < heads; ++h)
    for (std::size_t i = 0; i < n; ++i) {
      std::vector<double> s(n, -INFINITY);
      double mx = -INFINITY;
      for (std::size_t j = 0; j < n; ++j) {
        if (!allowed[i][j]) continue;
        double dot = 0;
        for (std::size_t c = 0; c < d; ++c) dot += q[i][h * d + c] * k[j][h * d + c];
        s[j] = dot / std::sqrt(static_cast<double>(d));
        mx = std::max(mx, s[j]);
      }
      if (mx == -INFINITY) continue;  // nothing visible: zeros
      double sum = 0;
      for (double& e : s) sum += (e = std::exp(e - mx));
      for (std::size_t j = 0; j < n; ++j)
        for (std::size_t c = 0; c < d; ++c) out[i][h * d + c] += s[j] / sum * v[j][h * d + c];
    }
  return out;
}

}  // namespace

DoubleResult double_forward(const fs::path& folder, const std::string& act,
                            const std::vector<std::int32_t>& ids,
                            const std::vector<std::int32_t>& positions,
                            const std::vector<std::int32_t>& token_types,
                            const std::vector<std::vector<int>>& allowed) {
  const nlohmann::json config = read_config(folder);
  const int heads = config["num_attention_heads"], layers = config["num_hidden_layers"];
  const double eps = config["layer_norm_eps"];
  DoubleWeights w{read_tensors(folder), ""};
  w.prefix = w.tensors.count("bert.embeddings.word_embeddings.weight") ? "bert." : "";
  const StoredTensor& words = w.get("embeddings.word_embeddings.weight");
  const std::size_t hidden = words.shape[1], vocab = words.shape[0];
  auto row = [&](const StoredTensor& t, std::size_t r) {
    return std::vector<double>(t.data.begin() + r * hidden, t.data.begin() + (r + 1) * hidden);
  };
  Matrix h;
  for (std::size_t t = 0; t < ids.size(); ++t) {
    auto x = row(words, ids[t]);
    auto p = row(w.get("embeddings.position_embeddings.weight"), positions[t]);
    auto y = row(w.get("embeddings.token_type_embeddings.weight"), token_types[t]);
    for (std::size_t i = 0; i < hidden; ++i) x[i] += p[i] + y[i];
    h.push_back(x);
  }
  layer_norm(h, w.get("embeddings.LayerNorm.weight"), w.get("embeddings.LayerNorm.bias"), eps);
  for (int l = 0; l < layers; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    auto lin = [&](const Matrix& x, const std::string& name) {
      return linear(x, w.get(p + name + ".weight"), w.get(p + name + ".bias"));
    };
    Matrix a = lin(attention(lin(h, "attention.self.query"), lin(h, "attention.self.key"),
                             lin(h, "attention.self.value"), heads, allowed),
                   "attention.output.dense");
    add(a, h);
    layer_norm(a, w.get(p + "attention.output.LayerNorm.weight"),
               w.get(p + "attention.output.LayerNorm.bias"), eps);
    Matrix i = lin(a, "intermediate.dense");
    activate(i, act);
    h = lin(i, "output.dense");
    add(h, a);
    layer_norm(h, w.get(p + "output.LayerNorm.weight"), w.get(p + "output.LayerNorm.bias"), eps);
  }
  DoubleResult result{h, {}};
  Matrix t = linear(h, w.get("cls.predictions.transform.dense.weight"),
                    w.get("cls.predictions.transform.dense.bias"));
  activate(t, act);
  layer_norm(t, w.get("cls.predictions.transform.LayerNorm.weight"),
             w.get("cls.predictions.transform.LayerNorm.bias"), eps);
  StoredTensor decoder = words;
  if (!config.value("tie_word_embeddings", true)) decoder = w.get("cls.predictions.decoder.weight");
  StoredTensor bias = w.get("cls.predictions.bias");
  (void)vocab;
  result.logits = linear(t, decoder, bias);
  return result;
}

// ---- checkpoints ----------------------------------------------------------------------------

TensorMap read_tensors(const fs::path& folder) {
  const masque::SafeTensors st = masque::SafeTensors::open(folder);
  TensorMap out;
  for (const auto& name : st.names()) {
    const masque::Tensor t = st.get_f32(name);
    out[name] = {t.shape(), std::vector<float>(t.f32(), t.f32() + t.numel())};
  }
  return out;
}

void write_safetensors(const fs::path& file, const TensorMap& tensors) {
  nlohmann::json header;
  header["__metadata__"] = {{"format", "pt"}};
  std::size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const std::size_t bytes = t.data.size() * sizeof(float);
    header[name] = {
        {"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  std::ofstream out(file, std::ios::binary);
  const std::uint64_t n = text.size();
  char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out.write(len, 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& [name, t] : tensors)
    out.write(reinterpret_cast<const char*>(t.data.data()),
              static_cast<std::streamsize>(t.data.size() * sizeof(float)));
  if (!out) throw std::runtime_error("cannot write " + file.string());
}

fs::path make_folder(const std::string& name, const nlohmann::json& config,
                     const TensorMap& tensors) {
  const fs::path dir = masque::test::scratch_dir(name);
  masque::test::write_file(dir / "config.json", config.dump(2));
  write_safetensors(dir / "model.safetensors", tensors);
  return dir;
}

nlohmann::json read_config(const fs::path& folder) {
  return nlohmann::json::parse(masque::test::read_file(folder / "config.json"));
}

// ---- comparisons ----------------------------------------------------------------------------

double max_abs_diff(const float* a, const float* b, std::size_t n) {
  double m = 0;
  for (std::size_t i = 0; i < n; ++i) m = std::max(m, std::abs(double{a[i]} - double{b[i]}));
  return m;
}

double logsumexp(const float* logits, std::size_t n) {
  double mx = -INFINITY;
  for (std::size_t i = 0; i < n; ++i) mx = std::max(mx, double{logits[i]});
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += std::exp(double{logits[i]} - mx);
  return mx + std::log(sum);
}

}  // namespace bert_test

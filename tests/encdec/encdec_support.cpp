#include "encdec_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "masque/params.hpp"
#include "masque/plugin.hpp"
#include "masque/safetensors.hpp"
#include "test_support.hpp"

namespace masque::test::encdec {

namespace fs = std::filesystem;

fs::path model_dir() {
  return shared_dir() / "models" / "aren-transliteration";
}

namespace {

// A declared parameter's default as the host would pass it.
ParamValue default_value(const ParamSpec& spec) {
  const std::string text = spec.default_value;
  switch (spec.type) {
    case ParamType::boolean:
      return text == "true";
    case ParamType::integer:
      return static_cast<std::int64_t>(std::stoll(text));
    case ParamType::number:
      return std::stod(text);
    case ParamType::string:
    case ParamType::path:
      return text;
    default:
      throw std::runtime_error(std::string("no test default for parameter ") + spec.name);
  }
}

}  // namespace

boost::dll::shared_library open_plugin() {
  return boost::dll::shared_library((plugin_dir() / "libmasque-model-encoder-decoder.so").string());
}

LoadedModel load_model(const boost::dll::shared_library& library, const fs::path& folder,
                       const std::map<std::string, ParamValue>& overrides) {
  LoadedModel loaded;
  loaded.library = library;
  const PluginDescriptor* d =
      loaded.library.get_alias<const PluginDescriptor*()>("masque_plugin_descriptor")();
  Params params;
  for (std::uint32_t i = 0; i < d->num_params; ++i) {
    const ParamSpec& spec = d->params[i];
    const auto given = overrides.find(spec.name);
    if (std::string(spec.name) == "path")
      params.set(spec.name, folder.string());
    else if (given != overrides.end())
      params.set(spec.name, given->second);
    else
      params.set(spec.name, default_value(spec));
  }
  for (const auto& [name, value] : overrides)
    if (!params.has(name))
      throw std::runtime_error("the encoder-decoder plugin has no parameter " + name);
  std::unique_ptr<Plugin> plugin(d->create(params));
  auto* model = dynamic_cast<Model*>(plugin.get());
  if (!model) throw std::runtime_error("the encoder-decoder plugin did not create a Model");
  plugin.release();
  loaded.model.reset(model);
  return loaded;
}

Vocabulary::Vocabulary(const fs::path& file, TokenId unk) : unk_(unk) {
  const std::string text = read_file(file);
  std::size_t begin = 0;
  while (begin < text.size()) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    ids_.emplace(text.substr(begin, end - begin), static_cast<TokenId>(tokens_.size()));
    tokens_.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
}

TokenId Vocabulary::id(const std::string& token) const {
  auto it = ids_.find(token);
  return it == ids_.end() ? unk_ : it->second;
}

std::vector<TokenId> Vocabulary::ids(const std::vector<std::string>& tokens) const {
  std::vector<TokenId> out;
  for (const auto& t : tokens) out.push_back(id(t));
  return out;
}

const Vocabulary& source_vocab() {
  static const Vocabulary v(model_dir() / "source_vocab.txt", 50);
  return v;
}
const Vocabulary& target_vocab() {
  static const Vocabulary v(model_dir() / "target_vocab.txt", 42);
  return v;
}

std::vector<nlohmann::json> examples() {
  return read_jsonl(model_dir() / "examples.jsonl");
}

std::vector<std::vector<TokenId>> bench_sources(std::size_t n) {
  std::istringstream in(read_file(shared_dir() / "bench" / "aren-20k.txt"));
  std::vector<std::vector<TokenId>> rows;
  std::string line;
  while (rows.size() < n && std::getline(in, line)) {
    std::vector<std::string> tokens;
    std::size_t begin = 0;
    while (begin <= line.size()) {
      std::size_t end = std::min(line.find(' ', begin), line.size());
      if (end > begin) tokens.push_back(line.substr(begin, end - begin));
      begin = end + 1;
    }
    rows.push_back(source_vocab().ids(tokens));
  }
  return rows;
}


double log_prob(const float* row, std::int32_t vocab, TokenId id) {
  double mx = -std::numeric_limits<double>::infinity();
  for (std::int32_t v = 0; v < vocab; ++v) mx = std::max(mx, static_cast<double>(row[v]));
  double sum = 0.0;
  for (std::int32_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - mx);
  return row[id] - mx - std::log(sum);
}

void block_end_at_first_step(float* row, std::int32_t step) {
  if (step == 0) row[kEnd] = std::numeric_limits<float>::lowest();
}

std::vector<double> teacher_forced(const Model& model, const std::vector<TokenId>& source,
                                   std::vector<TokenId> target) {
  const std::int32_t vocab = model.info().vocab_size;
  target.push_back(kEnd);
  auto state = model.start(source_batch({source}), nullptr);
  std::vector<double> out;
  Tensor logits;
  TokenId input = kStart;
  for (const TokenId next : target) {
    const TokenId tokens[] = {input};
    model.step(*state, step_input(tokens), logits);
    out.push_back(log_prob(logits.f32(), vocab, next));
    input = next;
  }
  return out;
}

Greedy greedy(const Model& model, const std::vector<TokenId>& source, int max_steps) {
  const std::int32_t vocab = model.info().vocab_size;
  auto state = model.start(source_batch({source}), nullptr);
  Greedy out;
  Tensor logits;
  TokenId next = kStart;
  for (int step = 0; step < max_steps; ++step) {
    const TokenId input[] = {next};
    model.step(*state, step_input(input), logits);
    out.logits.emplace_back(logits.f32(), logits.f32() + vocab);
    float* row = logits.f32();
    block_end_at_first_step(row, step);
    next = static_cast<TokenId>(std::max_element(row, row + vocab) - row);
    out.logprobs.push_back(log_prob(row, vocab, next));
    if (next == kEnd) {
      out.finished = true;
      break;
    }
    out.tokens.push_back(next);
  }
  return out;
}

namespace {

void write_safetensors(const fs::path& file, const std::map<std::string, Tensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    header[name] = {
        {"dtype", "F32"}, {"shape", t.shape()}, {"data_offsets", {offset, offset + t.bytes()}}};
    offset += t.bytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream out(file, std::ios::binary);
  const std::uint64_t size = text.size();
  out.write(reinterpret_cast<const char*>(&size), sizeof size);  // little-endian hosts
  out << text;
  for (const auto& [name, t] : tensors)
    out.write(static_cast<const char*>(t.raw()), static_cast<std::streamsize>(t.bytes()));
  if (!out) throw std::runtime_error("cannot write " + file.string());
}

}  // namespace

std::map<std::string, Tensor> original_tensors() {
  const SafeTensors st = SafeTensors::open(model_dir() / "model.safetensors");
  std::map<std::string, Tensor> out;
  for (const auto& name : st.names()) out[name] = st.get_f32(name);
  return out;
}

fs::path write_model(const std::string& name, const nlohmann::json& config_edits,
                     const std::map<std::string, Tensor>& tensors) {
  const fs::path dir = scratch_dir("encdec-" + name);
  nlohmann::json config = nlohmann::json::parse(read_file(model_dir() / "config.json"));
  for (const auto& [key, value] : config_edits.items()) {
    if (value.is_null())
      config.erase(key);
    else
      config[key] = value;
  }
  write_file(dir / "config.json", config.dump(2));
  write_safetensors(dir / "model.safetensors", tensors);
  return dir;
}

double worst_log_prob_error(const Model& model) {
  double worst = 0.0;
  for (const auto& ex : examples()) {
    const auto got = teacher_forced(model, source_vocab().ids(ex["source_tokens"]),
                                    target_vocab().ids(ex["expected"]));
    const auto want = ex["expected_token_log_probs"].get<std::vector<double>>();
    if (got.size() != want.size())
      throw std::runtime_error(ex["name"].get<std::string>() + ": " + std::to_string(got.size()) +
                               " log-probs, expected " + std::to_string(want.size()));
    for (std::size_t i = 0; i < want.size(); ++i)
      worst = std::max(worst, std::abs(got[i] - want[i]));
  }
  return worst;
}

std::vector<GreedyExample> greedy_examples(const Model& model) {
  std::vector<GreedyExample> out;
  for (const auto& ex : examples()) {
    const Greedy g = greedy(model, source_vocab().ids(ex["source_tokens"]));
    GreedyExample r;
    r.name = ex["name"].get<std::string>();
    r.finished = g.finished;
    for (TokenId id : g.tokens) r.text.push_back(target_vocab().token(id));
    r.expected = ex["expected"].get<std::vector<std::string>>();
    double sum = 0.0;
    for (double lp : g.logprobs) sum += lp;
    r.score_error = std::abs(sum / static_cast<double>(g.tokens.size() + 1) -
                             ex["expected_score"].get<double>());
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace masque::test::encdec

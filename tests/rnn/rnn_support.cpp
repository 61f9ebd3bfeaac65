#include "rnn_support.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <tuple>

#include "masque/params.hpp"
#include "masque/plugin.hpp"
#include "test_support.hpp"

namespace masque::test::rnn {

namespace fs = std::filesystem;

const std::vector<std::string>& fixture_names() {
  static const std::vector<std::string> names{"gru-bahdanau", "gru-luong", "lstm-bahdanau",
                                              "lstm-luong"};
  return names;
}

const std::vector<std::string>& wide_fixture_names() {
  static const std::vector<std::string> names{"gru-wide", "lstm-wide"};
  return names;
}

fs::path fixture_dir(const std::string& name) {
  return fs::path(RNN_FIXTURE_DIR) / name;
}

nlohmann::json expected(const std::string& name) {
  return nlohmann::json::parse(read_file(fixture_dir(name) / "expected.json"));
}

boost::dll::shared_library open_plugin() {
  // Kept loaded for the whole process: an exception the plugin throws has its destructor in the
  // plugin, and must not outlive the library (a failed create() drops every other handle).
  static const boost::dll::shared_library kept(
      (plugin_dir() / "libmasque-model-rnn-seq2seq.so").string());
  return kept;
}

LoadedModel load_model(const boost::dll::shared_library& library, const fs::path& folder,
                       const std::string& matmul_dtype, std::int64_t gate_table_mib) {
  LoadedModel loaded;
  loaded.library = library;
  const PluginDescriptor* d =
      loaded.library.get_alias<const PluginDescriptor*()>("masque_plugin_descriptor")();
  Params params;
  params.set("path", folder.string());
  params.set("matmul_dtype", matmul_dtype);
  if (gate_table_mib != -1) params.set("gate_table_mib", gate_table_mib);
  std::unique_ptr<Plugin> plugin(d->create(params));
  auto* model = dynamic_cast<Model*>(plugin.get());
  if (!model) throw std::runtime_error("the rnn-seq2seq plugin did not create a Model");
  plugin.release();
  loaded.model.reset(model);
  return loaded;
}

std::vector<double> log_softmax_row(const float* row, std::int32_t vocab) {
  double top = row[0];
  for (std::int32_t v = 1; v < vocab; ++v) top = std::max(top, double{row[v]});
  double sum = 0;
  for (std::int32_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - top);
  std::vector<double> out(vocab);
  for (std::int32_t v = 0; v < vocab; ++v) out[v] = row[v] - top - std::log(sum);
  return out;
}

namespace {

std::vector<double> step_one(const Model& model, DecodeState& state, TokenId token) {
  Tensor logits;
  const TokenId tokens[] = {token};
  StepInput input;
  input.tokens = tokens;
  model.step(state, input, logits);
  return log_softmax_row(logits.f32(), model.info().vocab_size);
}

}  // namespace

std::vector<double> teacher_forced(const Model& model, const std::vector<TokenId>& source,
                                   const std::vector<TokenId>& target) {
  auto state = model.start(source_batch({source}), nullptr);
  std::vector<double> out;
  TokenId prev = model.info().decoder_start;
  std::vector<TokenId> next(target);
  next.push_back(model.info().eos);
  for (TokenId t : next) {
    out.push_back(step_one(model, *state, prev)[t]);
    prev = t;
  }
  return out;
}

double worst_teacher_forced(const std::string& name, const std::string& matmul_dtype) {
  const auto loaded = load_model(name, matmul_dtype);
  const auto e = expected(name);  // (not a temporary: the loop would read a dead object)
  double worst = 0;
  for (const auto& r : e["records"]) {
    const auto got = teacher_forced(*loaded, r["source"].get<std::vector<TokenId>>(),
                                    r["target"].get<std::vector<TokenId>>());
    const auto& want = r["teacher_forced"];
    if (got.size() != want.size()) throw std::runtime_error(name + ": teacher forcing's length");
    for (std::size_t i = 0; i < got.size(); ++i)
      worst = std::max(worst, std::abs(got[i] - want[i].get<double>()));
  }
  return worst;
}

Greedy greedy(const Model& model, const std::vector<TokenId>& source, int max_steps) {
  auto state = model.start(source_batch({source}), nullptr);
  Greedy g;
  TokenId prev = model.info().decoder_start;
  for (int s = 0; s < max_steps; ++s) {
    const auto logp = step_one(model, *state, prev);
    prev = static_cast<TokenId>(std::max_element(logp.begin(), logp.end()) - logp.begin());
    g.logprobs.push_back(logp[prev]);
    if (prev == model.info().eos) break;
    g.tokens.push_back(prev);
  }
  return g;
}

Hypothesis beam(const Model& model, const std::vector<TokenId>& source, int beam_size,
                int max_steps) {
  const std::int32_t vocab = model.info().vocab_size;
  const TokenId eos = model.info().eos;
  auto state = model.start(source_batch({source}), nullptr);
  std::vector<Hypothesis> live{{}};
  std::vector<Hypothesis> finished;
  for (int s = 0; s < max_steps; ++s) {
    std::vector<TokenId> tokens;
    for (const Hypothesis& h : live)
      tokens.push_back(h.tokens.empty() ? model.info().decoder_start : h.tokens.back());
    Tensor logits;
    StepInput input;
    input.tokens = tokens;
    model.step(*state, input, logits);
    std::vector<std::tuple<double, std::int32_t, TokenId>> candidates;
    for (std::size_t b = 0; b < live.size(); ++b) {
      const auto logp = log_softmax_row(logits.f32() + b * vocab, vocab);
      for (TokenId v = 0; v < vocab; ++v)
        candidates.emplace_back(live[b].score + logp[v], static_cast<std::int32_t>(b), v);
    }
    std::sort(candidates.begin(), candidates.end(), [](const auto& x, const auto& y) {
      if (std::get<0>(x) != std::get<0>(y)) return std::get<0>(x) > std::get<0>(y);
      return std::tie(std::get<1>(x), std::get<2>(x)) < std::tie(std::get<1>(y), std::get<2>(y));
    });
    std::vector<Hypothesis> next;
    std::vector<std::int32_t> rows;
    for (int k = 0; k < beam_size; ++k) {
      const auto& [score, b, v] = candidates[k];
      if (v == eos) {
        finished.push_back({live[b].tokens, score});
        continue;
      }
      Hypothesis h{live[b].tokens, score};
      h.tokens.push_back(v);
      next.push_back(std::move(h));
      rows.push_back(b);
    }
    state->select(rows);
    live = std::move(next);
    if (live.empty() || static_cast<int>(finished.size()) >= beam_size) break;
  }
  finished.insert(finished.end(), live.begin(), live.end());
  Hypothesis best = finished.front();
  for (const Hypothesis& h : finished)
    if (h.score > best.score) best = h;
  return best;
}

}  // namespace masque::test::rnn

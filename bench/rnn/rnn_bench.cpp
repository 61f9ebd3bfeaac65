// Times the rnn-seq2seq plugin in process: start() (encoding) and greedy decoding steps of the
// batches described by a JSON file, on one thread. Used by bench/rnn/run.sh, which runs PyTorch
// on the same model and inputs.
//
//   bench_rnn MODEL_DIR INPUT_JSON [MATMUL_DTYPE]     (the plugin's matmul_dtype: f32, bf16)
//   INPUT_JSON: {"batch_sizes": [1, 32], "sources": [[ids...], ...], "steps": N, "repeats": R}
//   prints JSON: {"results": [{"batch_size", "encode_ms", "decode_ms", "tokens"}]}: the time
//   over all sources (min of R repeats) and the greedy tokens (N steps, </s> not special).
#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <vector>

#include <boost/dll/shared_library.hpp>
#include <nlohmann/json.hpp>

#include "masque/decoding.hpp"
#include "masque/model.hpp"
#include "masque/params.hpp"
#include "masque/plugin.hpp"
#include "masque/threading.hpp"

namespace {

using masque::TokenId;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

masque::Batch source_batch(const std::vector<std::vector<TokenId>>& rows) {
  masque::Batch batch;
  batch.batch = static_cast<std::int32_t>(rows.size());
  for (const auto& r : rows)
    batch.length = std::max(batch.length, static_cast<std::int32_t>(r.size()));
  batch.ids.assign(static_cast<std::size_t>(batch.batch) * batch.length, 0);
  batch.attention.reset(batch.batch, batch.length);
  for (std::int32_t b = 0; b < batch.batch; ++b) {
    masque::SequenceMask mask;
    for (std::size_t t = 0; t < rows[b].size(); ++t) {
      batch.ids[b * batch.length + t] = rows[b][t];
      mask.rank.push_back(0);
      mask.role.push_back(masque::TokenRole::content);
    }
    batch.attention.set_row(b, mask);
  }
  return batch;
}

struct Timing {
  double encode_ms = 0, decode_ms = 0;
  std::vector<std::vector<TokenId>> tokens;
};

// Encodes and greedily decodes `sources` in batches of `batch_size`.
Timing run(const masque::Model& model, const std::vector<std::vector<TokenId>>& sources,
           std::size_t batch_size, int steps) {
  Timing t;
  const std::int32_t vocab = model.info().vocab_size;
  masque::Tensor logits;
  for (std::size_t first = 0; first < sources.size(); first += batch_size) {
    const std::vector<std::vector<TokenId>> rows(
        sources.begin() + first, sources.begin() + std::min(sources.size(), first + batch_size));
    const masque::Batch batch = source_batch(rows);
    auto start = Clock::now();
    auto state = model.start(batch, nullptr);
    t.encode_ms += ms_since(start);
    std::vector<TokenId> tokens(rows.size(), model.info().decoder_start);
    std::vector<std::vector<TokenId>> out(rows.size());
    start = Clock::now();
    for (int s = 0; s < steps; ++s) {
      masque::StepInput input;
      input.tokens = tokens;
      model.step(*state, input, logits);
      for (std::size_t r = 0; r < rows.size(); ++r) {
        // libmasque's greedy argmax (what the greedy decoder runs), not a scalar loop.
        tokens[r] =
            masque::decoding::argmax({logits.f32() + r * vocab, static_cast<std::size_t>(vocab)});
        out[r].push_back(tokens[r]);
      }
    }
    t.decode_ms += ms_since(start);
    t.tokens.insert(t.tokens.end(), out.begin(), out.end());
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::cerr << "usage: bench_rnn MODEL_DIR INPUT_JSON [MATMUL_DTYPE]\n";
    return 2;
  }
  std::ifstream in(argv[2]);
  const auto input = nlohmann::json::parse(in);
  masque::set_thread_count(input.value("threads", 1));
  const auto sources = input["sources"].get<std::vector<std::vector<TokenId>>>();
  const int steps = input["steps"].get<int>(), repeats = input["repeats"].get<int>();

  boost::dll::shared_library library(std::string(MASQUE_BUILD_PLUGIN_DIR) +
                                     "/libmasque-model-rnn-seq2seq.so");
  const auto* d =
      library.get_alias<const masque::PluginDescriptor*()>("masque_plugin_descriptor")();
  masque::Params params;
  params.set("path", std::string(argv[1]));
  if (argc == 4) params.set("matmul_dtype", std::string(argv[3]));
  std::unique_ptr<masque::Model> model(dynamic_cast<masque::Model*>(d->create(params)));

  nlohmann::json results = nlohmann::json::array();
  for (const auto& b : input["batch_sizes"]) {
    Timing best;
    best.encode_ms = best.decode_ms = std::numeric_limits<double>::infinity();
    for (int r = 0; r < repeats; ++r) {
      Timing t = run(*model, sources, b.get<std::size_t>(), steps);
      best.encode_ms = std::min(best.encode_ms, t.encode_ms);
      best.decode_ms = std::min(best.decode_ms, t.decode_ms);
      best.tokens = std::move(t.tokens);
    }
    results.push_back({{"batch_size", b},
                       {"encode_ms", best.encode_ms},
                       {"decode_ms", best.decode_ms},
                       {"tokens", best.tokens}});
  }
  std::cout << nlohmann::json{{"results", results}}.dump() << "\n";
  model.reset();  // before the library is unloaded
  return 0;
}

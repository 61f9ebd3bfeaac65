// Shared helpers of the encoder-decoder tests: loading the plugin, the aren-transliteration
// vocabularies and examples, source batches, plain greedy decoding, and writing modified copies
// of the checkpoint for the error and configuration tests.
#pragma once

#include "test_support.hpp"

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/dll/shared_library.hpp>
#include <nlohmann/json.hpp>

#include "masque/model.hpp"
#include "masque/params.hpp"
#include "masque/tensor.hpp"

namespace masque::test::encdec {

using test::source_batch;  // test_support.hpp

std::filesystem::path model_dir();  // ../shared/models/aren-transliteration

// The model plugin and its library (declared first: destroyed last).
struct LoadedModel {
  boost::dll::shared_library library;
  std::unique_ptr<Model> model;
  const Model* operator->() const { return model.get(); }
  const Model& operator*() const { return *model; }
};
// libmasque-model-encoder-decoder.so from the build's plugin directory.
boost::dll::shared_library open_plugin();
// Creates the model of `folder` with every declared parameter set (path = folder, those in
// `overrides` as given, the others their defaults). Errors thrown by the plugin must be
// handled while `library` (or another handle of it) is still loaded: their code lives in the
// plugin.
LoadedModel load_model(const boost::dll::shared_library& library,
                       const std::filesystem::path& folder = model_dir(),
                       const std::map<std::string, ParamValue>& overrides = {});
inline LoadedModel load_model(const std::filesystem::path& folder = model_dir()) {
  return load_model(open_plugin(), folder);
}

// One token per line, split on '\n' only (some tokens are invisible format characters).
class Vocabulary {
 public:
  explicit Vocabulary(const std::filesystem::path& file, TokenId unk);
  TokenId id(const std::string& token) const;  // unk when unknown
  const std::string& token(TokenId id) const { return tokens_.at(id); }
  std::vector<TokenId> ids(const std::vector<std::string>& tokens) const;

 private:
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, TokenId> ids_;
  TokenId unk_;
};
const Vocabulary& source_vocab();
const Vocabulary& target_vocab();

std::vector<nlohmann::json> examples();
// The first `n` lines of ../shared/bench/aren-20k.txt, split on spaces, as source ids.
std::vector<std::vector<TokenId>> bench_sources(std::size_t n);

constexpr TokenId kStart = 1, kEnd = 2;

// One token per row, each at its row's next position.
inline StepInput step_input(std::span<const TokenId> tokens) {
  StepInput input;
  input.tokens = tokens;
  return input;
}

// log_softmax(row)[id] in double.
double log_prob(const float* row, std::int32_t vocab, TokenId id);
// The README's min_decoding_length = 1: at step 0 the </s> logit is the lowest float.
void block_end_at_first_step(float* row, std::int32_t step);

// log p(target_s | <s> target_<s, source) for every target token and the final </s>: the plain
// log-softmax of the forward pass (no min-length rule, unlike the greedy scores).
std::vector<double> teacher_forced(const Model& model, const std::vector<TokenId>& source,
                                   std::vector<TokenId> target);

struct Greedy {
  std::vector<TokenId> tokens;             // without </s>
  std::vector<double> logprobs;            // per generated token, </s> included when produced
  std::vector<std::vector<float>> logits;  // raw logits of each step
  bool finished = false;
};
// Plain greedy decoding of one source: argmax, </s> ends, at most `max_steps` steps.
Greedy greedy(const Model& model, const std::vector<TokenId>& source, int max_steps = 256);

// The largest |teacher-forced log p - expected_token_log_probs| over every example.
double worst_log_prob_error(const Model& model);

// Greedy decoding of each example against its expected output and score.
struct GreedyExample {
  std::string name;
  bool finished = false;
  std::vector<std::string> text, expected;
  double score_error = 0;  // |mean log p over tokens and </s> - expected_score|
};
std::vector<GreedyExample> greedy_examples(const Model& model);

// A copy of the checkpoint folder in a scratch dir: config.json with `config_edits` applied
// (null deletes a key) and model.safetensors rewritten from `tensors`.
std::filesystem::path write_model(const std::string& name, const nlohmann::json& config_edits,
                                  const std::map<std::string, Tensor>& tensors);
// The checkpoint's tensors (f32 views of the shared file).
std::map<std::string, Tensor> original_tensors();

}  // namespace masque::test::encdec

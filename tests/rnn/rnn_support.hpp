// Shared helpers of the rnn-seq2seq tests: the plugin, the generated fixtures and their
// expected outputs, source batches, and teacher forcing / greedy / beam search written
// exactly as reference_rnn.py does them.
#pragma once

#include "test_support.hpp"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <boost/dll/shared_library.hpp>
#include <nlohmann/json.hpp>

#include "masque/error.hpp"
#include "masque/model.hpp"

namespace masque::test::rnn {

using test::source_batch;  // test_support.hpp

// The four fixtures reference_rnn.py writes.
const std::vector<std::string>& fixture_names();
// Two more, wide enough for int8 products (reference_rnn.py's WIDE_FIXTURES).
const std::vector<std::string>& wide_fixture_names();
std::filesystem::path fixture_dir(const std::string& name);
nlohmann::json expected(const std::string& name);  // expected.json

// The model plugin and its library (declared first: destroyed last). Exceptions thrown by
// the plugin must be handled while the library is loaded.
struct LoadedModel {
  boost::dll::shared_library library;
  std::unique_ptr<Model> model;
  const Model& operator*() const { return *model; }
  const Model* operator->() const { return model.get(); }
};
boost::dll::shared_library open_plugin();
// `matmul_dtype`, `gate_table_mib`: the plugin parameters (gate_table_mib -1: not set).
LoadedModel load_model(const boost::dll::shared_library& library,
                       const std::filesystem::path& folder, const std::string& matmul_dtype = "f32",
                       std::int64_t gate_table_mib = -1);
inline LoadedModel load_model(const std::string& fixture, const std::string& matmul_dtype = "f32",
                              std::int64_t gate_table_mib = -1) {
  return load_model(open_plugin(), fixture_dir(fixture), matmul_dtype, gate_table_mib);
}

std::vector<double> log_softmax_row(const float* row, std::int32_t vocab);

// log p(target_s | ...) for every target token and the final </s>, one record alone.
std::vector<double> teacher_forced(const Model& model, const std::vector<TokenId>& source,
                                   const std::vector<TokenId>& target);

// The worst |log p - reference| over fixture `name`'s teacher-forced records, the model loaded
// with `matmul_dtype`.
double worst_teacher_forced(const std::string& name, const std::string& matmul_dtype);

struct Greedy {
  std::vector<TokenId> tokens;   // without </s>
  std::vector<double> logprobs;  // per step, </s> included when produced
};
Greedy greedy(const Model& model, const std::vector<TokenId>& source, int max_steps);

struct Hypothesis {
  std::vector<TokenId> tokens;
  double score = 0;
};
// reference_rnn.py's beam(), through DecodeState::select().
Hypothesis beam(const Model& model, const std::vector<TokenId>& source, int beam_size,
                int max_steps);

}  // namespace masque::test::rnn

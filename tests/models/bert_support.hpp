// Helpers of the bert model plugin tests: loading plugins from the build, the reference
// fixtures in ../shared/models/tiny-bert-*, layouts from the real mask plugins, an
// independent double-precision BERT, and writing modified checkpoints.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "masque/mask.hpp"
#include "masque/model.hpp"
#include "masque/params.hpp"

namespace bert_test {

// A plugin object with its library (kept loaded for the rest of the process).
template <typename T>
struct Loaded {
  std::shared_ptr<void> library;
  std::unique_ptr<T> object;
  T* operator->() const { return object.get(); }
  T& operator*() const { return *object; }
};

// libmasque-KIND-NAME.so from MASQUE_BUILD_PLUGIN_DIR, created with every declared parameter
// (its default, or the override).
Loaded<masque::Model> load_model(const std::filesystem::path& folder,
                                 const std::map<std::string, masque::ParamValue>& extra = {});
Loaded<masque::MaskStrategy> load_mask(
    const std::string& name, const std::map<std::string, masque::ParamValue>& params = {});

// A step's input; the spans must outlive the call.
inline masque::StepInput step_input(std::span<const masque::TokenId> tokens,
                                    std::span<const std::int32_t> positions = {},
                                    std::span<const std::int32_t> token_types = {},
                                    bool append = true) {
  masque::StepInput in;
  in.tokens = tokens;
  in.positions = positions;
  in.token_types = token_types;
  in.append = append;
  return in;
}

std::filesystem::path model_dir(const std::string& model);  // ../shared/models/MODEL
const nlohmann::json& reference(const std::string& model);  // its reference.json (cached)

// One sequence padded into row 0 of a 1 x length layout.
masque::AttentionLayout one_row_layout(const masque::SequenceMask& mask, std::int32_t length);
masque::SequenceMask build_mask(const masque::MaskStrategy& strategy, std::int32_t length,
                                std::vector<std::int32_t> segments = {},
                                std::vector<std::int32_t> order = {});

std::vector<std::int32_t> ints(const nlohmann::json& j);

// ---- the reference fixtures (reference.json: one input, right-padded, under four masks) ----
// The layout of the reference input under mask `name` (its `entry` in ref["masks"]), built by
// the real mask plugin.
masque::AttentionLayout reference_layout(const std::string& name, const nlohmann::json& entry,
                                         std::int32_t length, std::int32_t real);
// The reference input as a one-row batch under `layout` (token types of mask `name`), asking
// for hidden states.
masque::Batch reference_batch(const nlohmann::json& ref, const std::string& name,
                              masque::AttentionLayout layout);
// The largest differences between a forward of the reference input under mask `name` and the
// reference's top-10 logits and logsumexps (real positions) and hidden states.
struct ReferenceErrors {
  double logits = 0, logsumexp = 0, hidden = 0;
};
ReferenceErrors reference_errors(const masque::ForwardResult& out, const nlohmann::json& ref,
                                 const std::string& name, std::int32_t vocab,
                                 std::int32_t hidden_size);

// ---- an independent float64 BertForMaskedLM (dense allowed matrix, HF formulas) -----------
struct DoubleResult {
  std::vector<std::vector<double>> hidden;  // [tokens][hidden]
  std::vector<std::vector<double>> logits;  // [tokens][vocab]
};
// `allowed[i][j]`: query i may attend key j. `hidden_act`: gelu, gelu_new or relu.
DoubleResult double_forward(const std::filesystem::path& folder, const std::string& hidden_act,
                            const std::vector<std::int32_t>& ids,
                            const std::vector<std::int32_t>& positions,
                            const std::vector<std::int32_t>& token_types,
                            const std::vector<std::vector<int>>& allowed);

// ---- checkpoints ----------------------------------------------------------------------------
struct StoredTensor {
  std::vector<std::int64_t> shape;
  std::vector<float> data;
};
using TensorMap = std::map<std::string, StoredTensor>;
TensorMap read_tensors(const std::filesystem::path& folder);
void write_safetensors(const std::filesystem::path& file, const TensorMap& tensors);
// A fresh scratch folder holding `config` as config.json and `tensors` as model.safetensors.
std::filesystem::path make_folder(const std::string& name, const nlohmann::json& config,
                                  const TensorMap& tensors);
nlohmann::json read_config(const std::filesystem::path& folder);

// ---- comparisons ----------------------------------------------------------------------------
double max_abs_diff(const float* a, const float* b, std::size_t n);
double logsumexp(const float* logits, std::size_t n);  // in double

}  // namespace bert_test

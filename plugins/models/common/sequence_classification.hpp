// Hugging Face *ForSequenceClassification folders (BertForSequenceClassification,
// GPT2ForSequenceClassification, LlamaForSequenceClassification, Qwen2ForSequenceClassification):
// the same network as the family's LM, with a label head instead of the vocabulary head. The head
// runs on every row the caller asks for, like an LM head; which row is the record's (BERT's
// [CLS], a decoder's last token) is the classify task's choice, as in HF's modeling code.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "hf_config.hpp"
#include "masque/transformer/spec.hpp"

namespace masque::models {

// True when config.json's `architectures` names a *ForSequenceClassification class.
inline bool is_sequence_classifier(const JsonConfig& config) {
  const nlohmann::json& doc = config.json();
  const auto it = doc.find("architectures");
  if (it == doc.end() || !it->is_array()) return false;
  static const std::string suffix = "ForSequenceClassification";
  for (const auto& a : *it)
    if (a.is_string()) {
      const auto& name = a.get_ref<const std::string&>();
      if (name.size() > suffix.size() &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
        return true;
    }
  return false;
}

// PretrainedConfig.num_labels: the size of id2label when given, else `num_labels`, else 2.
inline std::int32_t num_labels(const JsonConfig& config) {
  const nlohmann::json& doc = config.json();
  const auto it = doc.find("id2label");
  if (it != doc.end() && !it->is_null()) {
    if (!it->is_object() || it->empty())
      fail(config, "id2label", "expected a non-empty object {\"0\": label, ...}");
    return static_cast<std::int32_t>(it->size());
  }
  return positive(config, "num_labels", {}, 2);
}

// The decoders' head: `score` ([labels, hidden], no bias) on the final hidden state.
inline transformer::HeadSpec score_head(const JsonConfig& config, std::int64_t hidden) {
  transformer::HeadSpec head;
  head.output.weight = {"score.weight", {num_labels(config), hidden}};
  return head;
}

// BERT's: the pooler (dense + tanh, `<prefix>pooler.dense`) then `classifier` (with a bias).
inline transformer::HeadSpec pooler_classifier_head(const JsonConfig& config,
                                                    const std::string& prefix,
                                                    std::int64_t hidden) {
  transformer::HeadSpec head;
  head.transform = transformer::linear(prefix + "pooler.dense", hidden, hidden, true);
  head.transform_activation = Activation::tanh;
  head.output = transformer::linear("classifier", num_labels(config), hidden, true);
  return head;
}

}  // namespace masque::models

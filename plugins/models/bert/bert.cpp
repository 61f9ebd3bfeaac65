// Model plugin `bert`: Hugging Face BertForMaskedLM (or BertModel) checkpoints under any mask
// strategy: bidirectional MLM, causal LM, UniLM seq2seq, permutation LM with query tokens; and
// BertForSequenceClassification folders, whose logits are the labels' (pooler + classifier).
//
// BERT itself is bidirectional; the layout decides the task (../shared/DESIGN.md). The model
// applies the layout as given: a full forward for any layout (rank-based or dense, with query
// tokens), and KV-cached start/step wherever the layout's ranks allow it (a mask strategy's
// supports_incremental()). A config reader over the Transformer tier: word + position + token
// type embeddings and a LayerNorm, post-norm blocks, the MLM head (transform, tied decoder).
#include <string>

#include "bert_family.hpp"
#include "hf_plugin.hpp"
#include "sequence_classification.hpp"

namespace masque::bert {

using namespace transformer;
using models::fail;
using models::positive;

// Encoder names are accepted with and without the `bert.` prefix (BertForMaskedLM vs
// BertModel); the head's (cls.predictions.*) are not prefixed. Fresh weights get the prefix.
std::string encoder_prefix(const SafeTensors& st) {
  if (st.size() == 0) return "bert.";  // initialised: BertForMaskedLM's names
  if (st.contains("bert.embeddings.word_embeddings.weight")) return "bert.";
  if (st.contains("embeddings.word_embeddings.weight")) return "";
  throw ConfigError(st.path().string() +
                    ": no tensor 'bert.embeddings.word_embeddings.weight' (nor "
                    "'embeddings.word_embeddings.weight'): not a BERT checkpoint");
}

// cls.predictions: transform (dense + hidden_act, LayerNorm), then the decoder, whose weight is
// the word embedding matrix when tied (HF's default) and whose bias is cls.predictions.bias
// (older checkpoints store it as cls.predictions.decoder.bias).
HeadSpec bert_mlm_head(const JsonConfig& config, const SafeTensors& st, const TensorSpec& words,
                       const models::BertShape& shape) {
  const TensorSpec output = config.get_bool("tie_word_embeddings", true)
                                ? words
                                : TensorSpec{"cls.predictions.decoder.weight", words.shape};
  const bool old_bias =
      !st.contains("cls.predictions.bias") && st.contains("cls.predictions.decoder.bias");
  return models::mlm_head(
      "cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm", output,
      old_bias ? "cls.predictions.decoder.bias" : "cls.predictions.bias", shape);
}

TransformerSpec read_spec(const JsonConfig& config, const SafeTensors& st, bool with_head) {
  models::expect_model_type(config, "bert");
  const std::string positions = config.get_string("position_embedding_type", "absolute");
  if (positions != "absolute")
    fail(config, "position_embedding_type",
         "only learned absolute position embeddings ('absolute') are supported, got '" + positions +
             "'");
  const std::int32_t vocab = positive(config, "vocab_size");
  const std::int32_t h = positive(config, "hidden_size");
  const std::int32_t layers = positive(config, "num_hidden_layers");
  const std::int32_t heads = positive(config, "num_attention_heads");
  const std::int32_t inner = positive(config, "intermediate_size");
  const std::int32_t max_positions = positive(config, "max_position_embeddings");
  const std::int32_t types = positive(config, "type_vocab_size", {}, 2);
  if (h % heads != 0)
    fail(config, "num_attention_heads",
         std::to_string(heads) + " heads do not divide hidden_size " + std::to_string(h));
  const float eps = models::positive_number(config, "layer_norm_eps", 1e-12);
  const Activation act = models::activation(config, "hidden_act", "gelu");

  const std::string p = encoder_prefix(st);
  TransformerSpec s{.architecture = "bert",
                    .kind = ModelKind::encoder_only,
                    .positions_key = "max_position_embeddings",
                    .vocab_size = vocab};
  s.decoder.hidden = h;
  EmbeddingSpec& e = s.decoder.embeddings;
  e.tokens = {p + "embeddings.word_embeddings.weight", {vocab, h}};
  e.positions = {.kind = PositionKind::learned,
                 .max_positions = max_positions,
                 .table = {p + "embeddings.position_embeddings.weight", {max_positions, h}}};
  e.token_types = {p + "embeddings.token_type_embeddings.weight", {types, h}};
  e.norm = norm(NormKind::layer_norm, p + "embeddings.LayerNorm", h, eps);
  models::add_bert_layers(s, p, {h, layers, heads, inner, act, eps});
  const bool classifier = models::is_sequence_classifier(config);
  if (with_head &&
      models::lacks_head(
          st, classifier ? "classifier.weight" : "cls.predictions.transform.dense.weight", s.head))
    return s;
  if (with_head && classifier)
    s.head = models::pooler_classifier_head(config, p, h);
  else if (with_head)
    s.head = bert_mlm_head(config, st, e.tokens, {h, layers, heads, inner, act, eps});
  else
    s.head.absent_reason = "mlm_head: false";
  return s;
}

}  // namespace masque::bert

namespace {

masque::Plugin* create(const masque::Params& params) {
  return masque::models::build_encoder(params, masque::bert::read_spec);
}

const masque::ParamSpec kParams[] = {
    masque::models::path_param(
        "the model folder: config.json and model.safetensors (or a sharded "
        "model.safetensors.index.json) with Hugging Face BertForMaskedLM tensor names, with or "
        "without the `bert.` prefix"),
    masque::models::mlm_head_param(
        "load the output head and compute logits: the masked-LM head (cls.predictions), "
        "or pooler + classifier for a BertForSequenceClassification folder; a folder "
        "without one (BertModel, sentence-transformers) loads as the encoder alone either "
        "way; false never loads it"),
    masque::models::kMatmulDtypeParam,
    masque::models::kInt4GroupParam,
    masque::models::kKvCacheDtypeParam,
    masque::models::kInitSeedParam,
};

}  // namespace

// BertConfig's names: one rate for the embeddings and every sub-layer's output.
constexpr masque::ModelTraits kBertTraits{.trainable = true,
                                          .embedding_dropout = "hidden_dropout_prob",
                                          .residual_dropout = "hidden_dropout_prob",
                                          .attention_dropout = "attention_probs_dropout_prob"};

MASQUE_MODEL_PLUGIN("bert", "1.1.0",
                    "BERT with its MLM head: encodings and token predictions under any mask",
                    "model_type=bert", kParams, kBertTraits, create)

// Model plugin `roberta`: Hugging Face RoBERTa and XLM-RoBERTa checkpoints (RobertaModel,
// RobertaForMaskedLM, RobertaForSequenceClassification and their XLMRoberta twins: one
// architecture, two vocabularies). BERT's network (bert_family.hpp) with RoBERTa's positions:
// HF numbers the real tokens from padding_idx + 1 (create_position_ids_from_input_ids), which
// for masque's right-padded rows is the learned table read at offset pad_token_id + 1; a
// one-row token-type table; the head `lm_head` (dense, gelu, layer_norm, decoder tied to the
// word embeddings, bias) or the classifier (dense + tanh on the first token, out_proj).
#include <string>

#include "bert_family.hpp"
#include "hf_plugin.hpp"
#include "sequence_classification.hpp"

namespace masque::roberta {

using namespace transformer;
using models::fail;
using models::positive;

// `roberta.` for the *ForMaskedLM / *ForSequenceClassification classes, none for *Model.
std::string encoder_prefix(const SafeTensors& st) {
  if (st.size() == 0 || st.contains("roberta.embeddings.word_embeddings.weight")) return "roberta.";
  if (st.contains("embeddings.word_embeddings.weight")) return "";
  throw ConfigError(st.path().string() +
                    ": no tensor 'roberta.embeddings.word_embeddings.weight' (nor "
                    "'embeddings.word_embeddings.weight'): not a RoBERTa checkpoint");
}

TransformerSpec read_spec(const JsonConfig& config, const SafeTensors& st, bool with_head) {
  const std::string type = config.get_string("model_type", "");
  if (type != "roberta" && type != "xlm-roberta")
    fail(config, "model_type", "expected 'roberta' or 'xlm-roberta', got '" + type + "'");
  const std::string positions = config.get_string("position_embedding_type", "absolute");
  if (positions != "absolute")
    fail(config, "position_embedding_type",
         "only learned absolute position embeddings ('absolute') are supported, got '" + positions +
             "'");
  const std::int32_t vocab = positive(config, "vocab_size");
  const models::BertShape shape{
      .hidden = positive(config, "hidden_size"),
      .layers = positive(config, "num_hidden_layers"),
      .heads = positive(config, "num_attention_heads"),
      .inner = positive(config, "intermediate_size"),
      .activation = models::activation(config, "hidden_act", "gelu"),
      .eps = static_cast<float>(models::positive_number(config, "layer_norm_eps", 1e-5))};
  const std::int32_t h = shape.hidden;
  if (h % shape.heads != 0)
    fail(config, "num_attention_heads",
         std::to_string(shape.heads) + " heads do not divide hidden_size " + std::to_string(h));
  const std::int32_t table = positive(config, "max_position_embeddings");
  const std::int32_t pad = static_cast<std::int32_t>(config.get_int("pad_token_id", 1));
  if (pad < 0 || pad + 1 >= table)
    fail(config, "pad_token_id",
         "the position table (max_position_embeddings " + std::to_string(table) +
             ") must hold pad_token_id + 1 and more rows");
  const std::int32_t types = positive(config, "type_vocab_size", {}, 1);

  const std::string p = encoder_prefix(st);
  TransformerSpec s{.architecture = "roberta",
                    .kind = ModelKind::encoder_only,
                    .positions_key = "max_position_embeddings",
                    .vocab_size = vocab};
  s.decoder.hidden = h;
  EmbeddingSpec& e = s.decoder.embeddings;
  e.tokens = {p + "embeddings.word_embeddings.weight", {vocab, h}};
  e.positions = {.kind = PositionKind::learned,
                 .max_positions = table - pad - 1,
                 .table = {p + "embeddings.position_embeddings.weight", {table, h}},
                 .offset = pad + 1};
  e.token_types = {p + "embeddings.token_type_embeddings.weight", {types, h}};
  e.norm = norm(NormKind::layer_norm, p + "embeddings.LayerNorm", h, shape.eps);
  models::add_bert_layers(s, p, shape);
  const bool classifier = models::is_sequence_classifier(config);
  if (with_head && models::lacks_head(
                       st, classifier ? "classifier.dense.weight" : "lm_head.dense.weight", s.head))
    return s;
  if (with_head && classifier) {
    s.head.transform = linear("classifier.dense", h, h, true);
    s.head.transform_activation = Activation::tanh;
    s.head.output = linear("classifier.out_proj", models::num_labels(config), h, true);
  } else if (with_head) {
    const TensorSpec output = config.get_bool("tie_word_embeddings", true)
                                  ? e.tokens
                                  : TensorSpec{"lm_head.decoder.weight", {vocab, h}};
    s.head = models::mlm_head("lm_head.dense", "lm_head.layer_norm", output, "lm_head.bias", shape);
  } else {
    s.head.absent_reason = "mlm_head: false";
  }
  return s;
}

}  // namespace masque::roberta

namespace {

masque::Plugin* create(const masque::Params& params) {
  return masque::models::build_encoder(params, masque::roberta::read_spec);
}

const masque::ParamSpec kParams[] = {
    masque::models::path_param(
        "the model folder: config.json and model.safetensors (or a sharded "
        "model.safetensors.index.json) with Hugging Face RoBERTa / XLM-RoBERTa tensor names, "
        "with or without the `roberta.` prefix"),
    masque::models::mlm_head_param(
        "load the output head: the masked-LM head (lm_head), or the classifier for a "
        "*ForSequenceClassification folder; a folder without one (RobertaModel, "
        "sentence-transformers) loads as the encoder alone either way; false never loads it"),
    masque::models::kMatmulDtypeParam,
    masque::models::kInt4GroupParam,
    masque::models::kKvCacheDtypeParam,
    masque::models::kInitSeedParam,
};

}  // namespace

MASQUE_MODEL_PLUGIN("roberta", "1.0.0",
                    "RoBERTa and XLM-RoBERTa: encodings, token predictions, labels under any mask",
                    "model_type=roberta;model_type=xlm-roberta", kParams,
                    masque::models::kTrainableAttentionDropout, create)

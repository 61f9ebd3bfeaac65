// Model plugin `distilbert`: Hugging Face DistilBERT checkpoints (DistilBertModel,
// DistilBertForMaskedLM, DistilBertForSequenceClassification). BERT's post-norm layers under
// DistilBERT's names (bert_family.hpp), word and learned position embeddings without token
// types, the MLM head vocab_transform / vocab_layer_norm / vocab_projector (tied), and the
// classifier pre_classifier + ReLU, classifier on the first token.
#include <string>

#include "bert_family.hpp"
#include "hf_plugin.hpp"
#include "sequence_classification.hpp"

namespace masque::distilbert {

using namespace transformer;
using models::fail;
using models::positive;

std::string encoder_prefix(const SafeTensors& st) {
  if (st.size() == 0 || st.contains("distilbert.embeddings.word_embeddings.weight"))
    return "distilbert.";
  if (st.contains("embeddings.word_embeddings.weight")) return "";
  throw ConfigError(st.path().string() +
                    ": no tensor 'distilbert.embeddings.word_embeddings.weight' (nor "
                    "'embeddings.word_embeddings.weight'): not a DistilBERT checkpoint");
}

TransformerSpec read_spec(const JsonConfig& config, const SafeTensors& st, bool with_head) {
  models::expect_model_type(config, "distilbert");
  if (config.get_bool("sinusoidal_pos_embds", false))
    fail(config, "sinusoidal_pos_embds",
         "only learned position embeddings are supported (false, DistilBERT's default)");
  const std::int32_t vocab = positive(config, "vocab_size");
  const models::BertShape shape{.hidden = positive(config, "dim"),
                                .layers = positive(config, "n_layers"),
                                .heads = positive(config, "n_heads"),
                                .inner = positive(config, "hidden_dim"),
                                .activation = models::activation(config, "activation", "gelu"),
                                .eps = 1e-12f};  // DistilBERT's LayerNorms, fixed in its code
  const std::int32_t h = shape.hidden;
  if (h % shape.heads != 0)
    fail(config, "n_heads",
         std::to_string(shape.heads) + " heads do not divide dim " + std::to_string(h));
  const std::int32_t max_positions = positive(config, "max_position_embeddings");

  const std::string p = encoder_prefix(st);
  TransformerSpec s{.architecture = "distilbert",
                    .kind = ModelKind::encoder_only,
                    .positions_key = "max_position_embeddings",
                    .vocab_size = vocab};
  s.decoder.hidden = h;
  EmbeddingSpec& e = s.decoder.embeddings;
  e.tokens = {p + "embeddings.word_embeddings.weight", {vocab, h}};
  e.positions = {.kind = PositionKind::learned,
                 .max_positions = max_positions,
                 .table = {p + "embeddings.position_embeddings.weight", {max_positions, h}}};
  e.norm = norm(NormKind::layer_norm, p + "embeddings.LayerNorm", h, shape.eps);
  models::add_bert_layers(s, p, shape,
                          {.layers = "transformer.layer.",
                           .query = "attention.q_lin",
                           .key = "attention.k_lin",
                           .value = "attention.v_lin",
                           .attention_out = "attention.out_lin",
                           .attention_norm = "sa_layer_norm",
                           .ffn_in = "ffn.lin1",
                           .ffn_out = "ffn.lin2",
                           .ffn_norm = "output_layer_norm"});
  const bool classifier = models::is_sequence_classifier(config);
  if (with_head && models::lacks_head(
                       st, classifier ? "pre_classifier.weight" : "vocab_transform.weight", s.head))
    return s;
  if (with_head && classifier) {
    s.head.transform = linear("pre_classifier", h, h, true);
    s.head.transform_activation = Activation::relu;
    s.head.output = linear("classifier", models::num_labels(config), h, true);
  } else if (with_head) {
    const TensorSpec output = config.get_bool("tie_word_embeddings", true)
                                  ? e.tokens
                                  : TensorSpec{"vocab_projector.weight", {vocab, h}};
    s.head = models::mlm_head("vocab_transform", "vocab_layer_norm", output, "vocab_projector.bias",
                              shape);
  } else {
    s.head.absent_reason = "mlm_head: false";
  }
  return s;
}

}  // namespace masque::distilbert

namespace {

masque::Plugin* create(const masque::Params& params) {
  return masque::models::build_encoder(params, masque::distilbert::read_spec);
}

const masque::ParamSpec kParams[] = {
    masque::models::path_param(
        "the model folder: config.json and model.safetensors (or a sharded "
        "model.safetensors.index.json) with Hugging Face DistilBERT tensor names, with or "
        "without the `distilbert.` prefix"),
    masque::models::mlm_head_param(
        "load the output head: the masked-LM head (vocab_transform, vocab_projector), or "
        "the classifier for a DistilBertForSequenceClassification folder; a folder without "
        "one (DistilBertModel, sentence-transformers) loads as the encoder alone either "
        "way; false never loads it"),
    masque::models::kMatmulDtypeParam,
    masque::models::kInt4GroupParam,
    masque::models::kKvCacheDtypeParam,
    masque::models::kInitSeedParam,
};

}  // namespace

MASQUE_MODEL_PLUGIN("distilbert", "1.0.0",
                    "DistilBERT: encodings, token predictions and labels under any mask",
                    "model_type=distilbert", kParams, masque::models::kTrainableAttentionDropout,
                    create)

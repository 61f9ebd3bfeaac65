// Model plugin `rnn-seq2seq`: LSTM/GRU encoder-decoders with Bahdanau or Luong attention and
// input feeding (OpenNMT-py / Nematus-style RNN translation models), on oneDNN: matmuls and a
// vectorized cell, the LSTM's batched steps and training on its RNN primitives. config.json
// keys and tensor names: README.md.
#include <string>

#include "masque/error.hpp"
#include "masque/folder_match.hpp"
#include "masque/params.hpp"
#include "masque/plugin.hpp"
#include "matmul_dtype.hpp"
#include "rnn_model.hpp"

namespace {

masque::Plugin* create(const masque::Params& params) {
  const masque::DType dtype = params.has("matmul_dtype")
                                  ? masque::models::matmul_dtype(params).compute
                                  : masque::DType::f32;
  const std::int64_t table_mib = params.has("gate_table_mib") ? params.get_int("gate_table_mib")
                                                              : masque::rnn::kDefaultGateTableMib;
  if (table_mib < 0)
    throw masque::ConfigError("rnn-seq2seq: gate_table_mib must be >= 0 (0: no tables), got " +
                              std::to_string(table_mib));
  return new masque::rnn::RnnSeq2SeqModel(
      params.get_string("path"), params.has("init_seed") ? params.get_int("init_seed") : -1, dtype,
      table_mib);
}

const masque::ParamSpec kParams[] = {
    {.name = "path",
     .type = masque::ParamType::path,
     .help = "the model folder: config.json (cell, sizes, attention, special tokens; keys listed "
             "in the plugin's README.md) and model.safetensors with torch nn.LSTM/nn.GRU tensor "
             "names (encoder.rnn.weight_ih_l0, ..._reverse, decoder.rnn.*, "
             "decoder.attention.*, generator.weight)",
     .flags = masque::kParamRequired},
    {.name = "init_seed",
     .type = masque::ParamType::integer,
     .default_value = "-1",
     .help = "-1: read the folder's weights. A seed >= 0: ignore any weights (the folder needs "
             "only config.json) and initialise every parameter uniformly in [-0.1, 0.1] "
             "(Luong et al. 2015; `masque train` with init: scratch)"},
    {.name = "matmul_dtype",
     .type = masque::ParamType::string,
     .default_value = "f32",
     .help = "type of the inputs and weights of every product (recurrent layers, attention "
             "projections, output layer; accumulation, the hidden and cell states, attention "
             "scores and logits stay f32): f32 (exact); bf16 for half the weight memory and "
             "AVX-512 BF16 / AMX speed at about 3 significant digits (log-probs moved by up to "
             "0.01 (LSTM) and 0.03 (GRU) nats on the test models, and greedy outputs can "
             "change where two tokens are close; needs "
             "AVX-512, elsewhere loading fails with a clear error; inference only: training "
             "runs f32); int8 for a quarter of the weight memory and VNNI / AMX int8 speed at "
             "about 2 significant digits: every product whose shape passes libmasque's int8 "
             "rule (>= 128 inputs, 64 outputs, 32768 weights; the others stay f32) runs on "
             "int8 weights (one scale per output) and int8 inputs (one scale per row and "
             "call), the recurrent layers on two such products per step and an f32 cell "
             "(log-probs moved by up to 0.03 (LSTM) and 0.1 (GRU) nats on the test models; "
             "inference only)",
     .choices = "f32|bf16|int8"},
    {.name = "gate_table_mib",
     .type = masque::ParamType::integer,
     .default_value = "256",
     .help = "the first encoder layer's input gates W_ih e + b depend on the source token alone: "
             "when the tables of them (source vocabulary x 2 directions x gates x hidden floats) "
             "take at most this many MiB, they are computed once at load and a token's gates "
             "are read from them instead of computed (the same numbers; f32 and int8, not "
             "bf16). 0: never"},
};

// Trainable from init_seed. The network refuses any dropout; declaring attention_dropout as the
// rate's key makes `task.dropout: p` a refusal there instead of a silent no-op.
constexpr masque::ModelTraits kTraits{.trainable = true, .attention_dropout = "attention_dropout"};

const masque::PluginDescriptor* descriptor() {
  static const masque::PluginDescriptor d{
      .kind = masque::PluginKind::model,
      .name = "rnn-seq2seq",
      .version = "1.0.0",
      .license = "MIT",
      .description =
          "LSTM/GRU encoder-decoder with Bahdanau or Luong attention (bidirectional encoder, "
          "input feeding) on oneDNN (matmuls, RNN primitives); decodes step by step via the "
          "seq2seq "
          "task",
      .params = kParams,
      .num_params = sizeof(kParams) / sizeof(kParams[0]),
      .create = create,
      .model = &kTraits,
  };
  return &d;
}

}  // namespace

MASQUE_PLUGIN(descriptor)
MASQUE_FOLDER_MATCH("architecture=rnn-seq2seq")

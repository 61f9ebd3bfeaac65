// The weights of a BertForMaskedLM checkpoint, prepared as masque layers.
#pragma once

#include <filesystem>
#include <vector>

#include "bert_config.hpp"
#include "masque/layers.hpp"
#include "masque/safetensors.hpp"

namespace masque::bert {

struct Embeddings {
  Embedding words, positions, token_types;
  LayerNorm norm;
};

// One post-norm encoder layer.
struct EncoderLayer {
  Linear qkv;  // attention.self.{query,key,value} fused: hidden -> [q | k | v]
  Linear attention_output;
  LayerNorm attention_norm;
  Linear intermediate;  // with hidden_act fused
  Linear output;
  LayerNorm output_norm;
};

// cls.predictions: transform (dense + hidden_act, LayerNorm), then the decoder to the vocabulary.
struct MlmHead {
  Linear transform;
  LayerNorm norm;
  Linear decoder;
  bool empty() const { return decoder.empty(); }
};

struct BertWeights {
  Embeddings embeddings;
  std::vector<EncoderLayer> layers;
  MlmHead head;  // empty when not loaded
};

// The safetensors checkpoint of a model folder: the sharded index when there is one, else
// model.safetensors (opened as a file so that errors name it).
SafeTensors open_checkpoint(const std::filesystem::path& folder);

// Loads every tensor with its expected shape. Names are accepted with and without the `bert.`
// prefix (BertForMaskedLM vs BertModel); missing tensors and wrong shapes are ConfigErrors
// naming the file and the tensor. Every Linear, the head's included, computes in `compute`.
BertWeights load_weights(const SafeTensors& checkpoint, const BertConfig& config, bool mlm_head,
                         DType compute = DType::f32);

}  // namespace masque::bert

// Sentence vectors from a model's final hidden states: which rows of a record form its vector
// (its first token, every token, its last token) and how they combine.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "masque/model.hpp"
#include "masque/tensor.hpp"

namespace masque {

enum class Pooling : std::uint8_t {
  cls,   // the first token's state ([CLS] of BERT-like encoders)
  mean,  // the mean over the record's tokens (pads excluded)
  last,  // the last token's state (the one token of a causal model that saw the whole record)
  max,   // the element-wise maximum over the record's tokens (sentence-transformers' max)
};

// "auto" picks cls for encoder-only and last for decoder-only models. ConfigError otherwise.
Pooling parse_pooling(const std::string& name, ModelKind kind);
const char* to_string(Pooling pooling);

// The rows of a record of `length` tokens that `pooling` reads, relative to its first token;
// mean and max leave out the first `skip` (sentence-transformers' include_prompt: false).
std::vector<std::int32_t> pooled_rows(Pooling pooling, std::int32_t length, std::int32_t skip = 0);

// Pools `rows` consecutive rows of `hidden` starting at `first` (what pooled_rows asked for):
// their mean in double (one row: that row), or with Pooling::max their element-wise maximum;
// then L2-normalises the result when `normalize` (a zero vector stays zero).
std::vector<float> pool(const Tensor& hidden, std::size_t first, std::size_t rows, bool normalize,
                        Pooling pooling = Pooling::mean);

// v / max(||v||, 1e-12) in place (torch.nn.functional.normalize), the norm summed in double.
void normalize_l2(std::vector<float>& v);

}  // namespace masque

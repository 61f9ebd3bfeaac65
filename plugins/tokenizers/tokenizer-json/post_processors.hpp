// Post-processors of tokenizer.json ("post_processor"): TemplateProcessing, BertProcessing,
// RobertaProcessing, ByteLevel and Sequence. They add the special tokens of add_special (and
// the type ids of a pair) and adjust offsets (ByteLevel's trim_offsets), as Hugging Face's
// processors/*.rs do.
#pragma once

#include <memory>
#include <string>

#include "json_node.hpp"
#include "masque/tokenizer.hpp"

namespace masque::hfjson {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // `first` and `second` (null for a single text) hold the model's tokens. Returns true when
  // the processor joined a pair into `first`; otherwise the caller joins it (join_pair).
  virtual bool process(Encoding& first, Encoding* second, bool add_special) const = 0;
};

std::unique_ptr<PostProcessor> make_post_processor(const Node& node);

// Concatenates a pair without special tokens (no post-processor): type ids 0 then 1.
void join_pair(Encoding& first, Encoding& second);

}  // namespace masque::hfjson

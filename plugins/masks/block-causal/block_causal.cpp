// Mask strategy `block-causal` (block diffusion, BD3-LM): bidirectional inside a block of
// `block_size` tokens, causal across blocks — a token sees its whole block and every earlier
// block. rank = block index, so the kernel's rank rule is the pattern and no n x n mask is
// built. With segment ids (seq2seq: 0 = source, 1 = target) the source is one block of its own,
// whatever its length, and the target's blocks follow it.
//
// Asked for its query stream (MaskRequest::query_stream: the diffusion objective does), it
// appends BD3-LM's training layout: a noised copy of every target token (every token without
// segments), role block_query, ranked one below its block, so a copy sees its own block's
// copies and the clean blocks before it, and no other token sees it. The kernel evaluates the
// rule; no n x n mask is built.
//
// Not incremental: a token of an unfinished block must see the ones added to it later, which a
// KV cache of single tokens cannot give; a block decoder recomputes the current block over the
// cached finished ones.
#include <limits>
#include <string>

#include "masque/error.hpp"
#include "masque/mask.hpp"
#include "masque/params.hpp"

namespace {

class BlockCausalMask final : public masque::MaskStrategy {
 public:
  explicit BlockCausalMask(std::int32_t block) : block_(block) {}

  masque::SequenceMask build(const masque::MaskRequest& request) const override {
    masque::SequenceMask mask;
    mask.rank.resize(request.length);
    mask.role.assign(request.length, masque::TokenRole::content);
    if (request.segments.empty()) {
      for (std::int32_t i = 0; i < request.length; ++i) mask.rank[i] = i / block_;
      if (request.query_stream) append_copies(mask, 0, request.length);
      return mask;
    }
    if (request.segments.size() != static_cast<std::size_t>(request.length))
      throw masque::RecordError("block-causal: a seq2seq request needs one segment id per token (" +
                                std::to_string(request.length) + " tokens, " +
                                std::to_string(request.segments.size()) + " segment ids)");
    std::int32_t target = 0;  // target tokens so far
    for (std::int32_t i = 0; i < request.length; ++i) {
      const std::int32_t s = request.segments[i];
      if (s != 0 && s != 1)
        throw masque::RecordError(
            "block-causal: segment ids must be 0 (source) or 1 (target), "
            "got " +
            std::to_string(s) + " at position " + std::to_string(i));
      if (s == 0 && target > 0)
        throw masque::RecordError(
            "block-causal: a source token (segment 0) after the target, at "
            "position " +
            std::to_string(i));
      mask.rank[i] = s == 0 ? 0 : 1 + target++ / block_;
    }
    if (request.query_stream) append_copies(mask, request.length - target, request.length);
    return mask;
  }
  bool supports_incremental() const override { return false; }

 private:
  // The noised copies of tokens [first, end), each ranked below its block's clean tokens.
  static void append_copies(masque::SequenceMask& mask, std::int32_t first, std::int32_t end) {
    for (std::int32_t i = first; i < end; ++i) {
      mask.rank.push_back(mask.rank[i] - 1);
      mask.role.push_back(masque::TokenRole::block_query);
      mask.query_positions.push_back(i);
    }
  }

  std::int32_t block_;
};

masque::Plugin* create(const masque::Params& params) {
  return new BlockCausalMask(static_cast<std::int32_t>(params.get_int("block_size")));
}

const masque::ParamSpec kParams[] = {
    {.name = "block_size",
     .type = masque::ParamType::integer,
     .default_value = "4",
     .help = "tokens per block: bidirectional inside a block, every earlier block visible "
             "(1: causal; the sequence length or more: bidirectional)",
     .min = 1,
     .max = 2147483647},
};

const masque::PluginDescriptor* descriptor() {
  static const masque::PluginDescriptor d{
      .kind = masque::PluginKind::mask,
      .name = "block-causal",
      .version = "1.0.0",
      .license = "MIT",
      .description = "block diffusion: bidirectional within blocks, causal across them",
      .params = kParams,
      .num_params = sizeof(kParams) / sizeof(kParams[0]),
      .create = create,
  };
  return &d;
}

}  // namespace

MASQUE_PLUGIN(descriptor)

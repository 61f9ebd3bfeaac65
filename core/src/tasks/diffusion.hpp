// Diffusion generation (MDLM / LLaDA; block diffusion, BD3-LM): a target of L [MASK] slots after
// a given source is unmasked over T denoising steps, each step filling the slots its rule picks
// — the most confident ones (low-confidence remasking) or a seeded random choice — with each
// slot's best token (or a seeded sample). The slots fall into blocks by the mask's ranks (runs
// of equal rank): bidirectional is one block, block-causal its blocks, unmasked one after
// another, each seeing the source and the finished blocks only.
//
// Where the mask ranks every block above everything before it (block-causal, seq2seq) and the
// model takes several tokens per step (takes_several_tokens), the source is prefilled into the
// model's KV cache, each denoising step runs the current block's tokens alone against the cache
// (bidirectional within the block: they share a rank) and a finished block joins the cache in
// one step of its own (rows without a finished block get pad columns in that step: rows out of
// step cost a little cache). Otherwise (bidirectional: every step sees every slot, so nothing
// stays fixed to cache) every step is a full forward of the source and the blocks so far. Both
// give the same tokens. The task `diffusion-generate` runs it over a corpus; tests drive it
// directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "masque/mask.hpp"
#include "masque/model.hpp"

namespace masque {

struct DiffusionOptions {
  std::int32_t steps = 0;         // T over the whole target, shared by its blocks (0: one slot
                                  // per step)
  bool random_remasking = false;  // unmask a seeded random choice, not the most confident
  double temperature = 0;         // 0: each slot's argmax; > 0: a seeded sample
  std::uint64_t seed = 0;
  bool recompute = false;  // a full forward every step even where the cache applies (tests)
};

// Continuous batching: at most `max_rows` inputs decode at a time (0: all of them), and as rows
// finish the next inputs join, in order, once an eighth of the rows is free; the inputs joining
// at once are prefilled together within `max_tokens` (source + slots, padded to the longest;
// 0: no limit). A row's outputs do not depend on when it joined.
struct DiffusionBatching {
  std::int32_t max_rows = 0;
  std::size_t max_tokens = 0;
};

struct DiffusionInput {
  std::vector<TokenId> source;  // the given tokens (segment and token type 0)
  std::int32_t slots = 0;       // L (segment and token type 1)
  std::uint64_t record_id = 0;  // seeds the record's draws
};

struct DiffusionOutput {
  std::vector<TokenId> tokens;       // the L slots
  std::vector<std::int32_t> step;    // per slot: the denoising step (0-based) that filled it
  std::vector<double> logprob;       // per slot: its token's log-probability at that step
  std::int32_t steps = 0;            // denoising steps of the record
  std::vector<std::int32_t> blocks;  // slots per block, in order
  bool cached = false;               // the source and finished blocks were in the KV cache
};

// The blocks of L slots after `source_length` given tokens under `mask`: sizes in order.
std::vector<std::int32_t> diffusion_blocks(const MaskStrategy& mask, std::int32_t source_length,
                                           std::int32_t slots);

// How many slots each of the steps of a block of n slots fills: LLaDA's schedule (n / T each,
// the first n mod T one more) with T = max(1, min(n, ceil(steps * n / total))); steps 0: n.
std::vector<std::int32_t> diffusion_schedule(std::int32_t n, std::int32_t total,
                                             std::int32_t steps);

// Decodes the inputs (each row's result independent of the others and of the batching).
// RecordError for inputs the model cannot take.
std::vector<DiffusionOutput> diffusion_decode(const Model& model, const MaskStrategy& mask,
                                              TokenId mask_token,
                                              std::span<const DiffusionInput> inputs,
                                              const DiffusionOptions& options,
                                              const DiffusionBatching& batching = {});

}  // namespace masque

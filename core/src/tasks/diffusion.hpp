// Diffusion generation (MDLM / LLaDA; block diffusion, BD3-LM): a target of L [MASK] slots after
// a given source is unmasked over T denoising steps, each step filling the slots its rule picks
// — the most confident ones (low-confidence remasking) or a seeded random choice — with each
// slot's best token (or a seeded sample). The slots fall into blocks by the mask's ranks (runs
// of equal rank): bidirectional is one block, block-causal its blocks, unmasked one after
// another, each seeing the source and the finished blocks only. Every step runs a full
// forward of that prefix: the finished blocks are recomputed, not cached (Model::step appends
// one token per row, and a block needs several that see each other). The task `diffusion-generate`
// runs it over a corpus; tests drive it directly.
#pragma once

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
  std::int32_t steps = 0;            // denoising steps (model forwards) of the record
  std::vector<std::int32_t> blocks;  // slots per block, in order
};

// The blocks of L slots after `source_length` given tokens under `mask`: sizes in order.
std::vector<std::int32_t> diffusion_blocks(const MaskStrategy& mask, std::int32_t source_length,
                                           std::int32_t slots);

// How many slots each of the steps of a block of n slots fills: LLaDA's schedule (n / T each,
// the first n mod T one more) with T = max(1, min(n, ceil(steps * n / total))); steps 0: n.
std::vector<std::int32_t> diffusion_schedule(std::int32_t n, std::int32_t total,
                                             std::int32_t steps);

// Decodes the inputs as one batch (each row's result independent of the others). RecordError
// for inputs the model cannot take.
std::vector<DiffusionOutput> diffusion_decode(const Model& model, const MaskStrategy& mask,
                                              TokenId mask_token,
                                              std::span<const DiffusionInput> inputs,
                                              const DiffusionOptions& options);

}  // namespace masque

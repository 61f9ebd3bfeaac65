// Plugin kind `model`: a network that computes logits for a batch under an attention layout,
// and incrementally with a KV cache.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "masque/layers.hpp"
#include "masque/mask.hpp"
#include "masque/plugin.hpp"
#include "masque/tensor.hpp"
#include "masque/tokenizer.hpp"

namespace masque {

enum class ModelKind : std::uint8_t {
  decoder_only,     // GPT-2, Llama: causal LMs
  encoder_only,     // BERT: any mask strategy
  encoder_decoder,  // a bidirectional encoder, a causal decoder, cross-attention
};

struct ModelInfo {
  std::string architecture;  // the network's family as the model plugin names it (for messages)
  ModelKind kind = ModelKind::decoder_only;
  std::int32_t vocab_size = 0;         // output (target) vocabulary
  std::int32_t source_vocab_size = 0;  // encoder-decoder input vocabulary, else = vocab_size
  std::int32_t hidden_size = 0;
  std::int32_t num_layers = 0;
  std::int32_t max_positions = 0;  // longest sequence the model accepts (0 = unlimited)
  bool uses_token_types = false;
  // The network's sliding attention window (Mistral / Qwen2 `sliding_window`; 0: none). The
  // model applies it itself, inside the kernel, under any layout and with the KV cache.
  std::int32_t sliding_window = 0;
  // From the model's config; -1 when not given.
  TokenId bos = -1, eos = -1, pad = -1, decoder_start = -1;
  // The first target token of every hypothesis after decoder_start, unless a record gives its
  // own prefix (HF's forced_bos_token_id: mBART-50's and NLLB's target language); -1: none.
  TokenId forced_bos = -1;
  // Attention heads of the decoder stack's self- and cross-attention, and whether forward() and
  // step() honour an AttentionRecording (0 / false: the model cannot show its attention).
  std::int32_t num_heads = 0;
  bool records_attention = false;
  // Every id that ends a generated sequence: eos first, then the others a config lists
  // (generation_config.json's eos_token_id list: Llama 3 Instruct ends a turn with <|eot_id|>,
  // not its eos). Empty when the model has no eos.
  std::vector<TokenId> end_ids{};
  // end_ids, or {eos} for a model that fills eos alone.
  std::vector<TokenId> end_tokens() const {
    if (!end_ids.empty() || eos < 0) return end_ids;
    return {eos};
  }
};

// Attention probabilities a caller asks forward() or step() to record: those of one layer of
// the decoder stack (the only stack of decoder-only and encoder-only models), self-attention or
// cross-attention to the encoder memory, for query heads [first_head, first_head + heads).
// `probs` receives [heads, rows, queries, keys]: forward(): rows = batch, queries = keys = the
// batch length; step(): one query per row (StepInput::length), keys = the cache's columns (the kept
// ones, then the new token) or, for cross-attention, the padded source length. Disallowed keys get
// 0. A model whose info().records_attention is false throws ConfigError.
struct AttentionRecording {
  std::int32_t layer = -1;  // -1: the last layer
  bool cross = false;
  std::int32_t first_head = 0;
  std::int32_t heads = 1;  // 0: every head from first_head on
  Tensor* probs = nullptr;
};

// A padded batch of B sequences of T tokens; element (b, t) is at b * T + t.
struct Batch {
  std::int32_t batch = 0, length = 0;
  std::vector<TokenId> ids;               // B*T
  std::vector<std::int32_t> positions;    // B*T position ids
  std::vector<std::int32_t> token_types;  // B*T, or empty for all 0
  AttentionLayout attention;
  std::vector<std::int32_t> output_rows;  // flat rows that need outputs; empty = all B*T
  bool want_logits = true;
  bool want_hidden = false;
  // forward(), and start() of decoder-only / encoder-only models (the prompt's self-attention,
  // keys = the batch length); null: none (no cost).
  const AttentionRecording* record_attention = nullptr;
};

struct ForwardResult {
  Tensor logits;  // [rows, vocab_size] for output_rows (all B*T rows if output_rows is empty)
  Tensor hidden;  // [rows, hidden_size] final hidden states, when want_hidden
};

// The incremental state of a batch being decoded: KV caches (and encoder memory).
class BOOST_SYMBOL_VISIBLE DecodeState {
 public:
  virtual ~DecodeState();
  virtual std::int32_t rows() const = 0;
  // New row i becomes old row rows[i] (reorder for beam search, replicate, drop finished).
  virtual void select(std::span<const std::int32_t> rows) = 0;
  virtual std::unique_ptr<DecodeState> fork() const = 0;
  // Continuous batching: whether append() works, and the rows of `other` (a state the same
  // model's start() made, on its own batch) joining after this state's rows, as if both had been
  // started together. The defaults: false, and append() throws RuntimeError.
  virtual bool can_append() const;
  virtual void append(DecodeState& other);
  // `rows` leave for a new state (its row i = old row rows[i]); this one keeps the others in
  // their order (continuous batching starts records a batch at a time and admits them a few
  // at a time). The default: fork(), then select() on both.
  virtual std::unique_ptr<DecodeState> split(std::span<const std::int32_t> rows);
};

struct StepInput {
  std::span<const TokenId> tokens;            // one per row
  std::span<const std::int32_t> positions;    // one per row; empty = each row's next position
  std::span<const std::int32_t> token_types;  // one per row; empty = 0
  // false: the token is a query that sees the cache and itself and is not kept (predicting a
  // chosen position in a permutation order).
  bool append = true;
  const AttentionRecording* record_attention = nullptr;  // null: none (no cost)
  // Several tokens per row (ABI 8.1; only for a model that takes_several_tokens()): `length`
  // tokens per row, row-major in `tokens` (and in positions, token_types, ranks and roles when
  // given). Each attends to its row's cache and to the row's other step tokens by the rank rule,
  // so tokens of one rank see each other: a block of block diffusion. With append false they
  // are content tokens that are not kept; empty positions: the row's next positions in order.
  std::int32_t length = 1;
  std::span<const std::int32_t> ranks{};  // per token; empty: each row's next rank, for all
  // Per token, content or pad (a shorter row's padding: seen by no token); empty: content.
  std::span<const TokenRole> roles{};
  // The step tokens (row * length + t) whose logits to write, in this order; empty: all.
  std::span<const std::int32_t> output_rows{};
  bool want_logits = true;  // false: no logits (a block only joins the cache); logits untouched
};

// Contract:
// - forward(), start() and step() are const and may run concurrently on different batches and
//   states from several threads. A DecodeState is used by one thread at a time.
// - A new step token ranks above everything in its row's cache (so any rank-based strategy
//   stays valid) and is content, or a query when it is a row's only one and append is false;
//   a row's several step tokens may share a rank (and see each other).
// - Errors: RecordError for inputs the model cannot take (ids out of range, too long).
class BOOST_SYMBOL_VISIBLE Model : public Plugin {
 public:
  virtual const ModelInfo& info() const = 0;
  // The model's Linear layers: what masque inspect and the run summary report of its matmul
  // types (matmul_summary()). The default: none to report.
  virtual LinearList linear_layers() const;
  // Full forward of a batch under its attention layout. Encoder-decoder models throw
  // ConfigError (use start/step).
  virtual ForwardResult forward(const Batch& batch) const = 0;
  // Starts incremental decoding.
  // - decoder-only / encoder-only: runs `batch` (the prompt) into the KV cache and, when
  //   `logits` is non-null, writes the logits of batch.output_rows there;
  // - encoder-decoder: encodes `batch` as the source; the decoder starts empty and `logits` is
  //   left untouched (feed the decoder start token with step()).
  virtual std::unique_ptr<DecodeState> start(const Batch& batch, Tensor* logits) const = 0;
  // Appends one token per row (or StepInput::length) and writes logits [rows, vocab_size] (or
  // [output rows, vocab_size]).
  virtual void step(DecodeState& state, const StepInput& input, Tensor& logits) const = 0;
};

// Whether step() of `model` takes several tokens per row (StepInput::length, ranks, roles,
// output_rows, want_logits): the Transformer tier's models do. Until a major version puts it
// into ModelInfo, a model plugin of its own (rnn-seq2seq) steps one token per row.
BOOST_SYMBOL_VISIBLE bool takes_several_tokens(const Model& model);

}  // namespace masque

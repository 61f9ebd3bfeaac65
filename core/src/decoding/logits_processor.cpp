// Logits processing shared by the decoders: repetition penalty, min length, n-gram blocking.
#include <limits>

#include "masque/decoding.hpp"

namespace masque::decoding {

namespace {

constexpr float kBlocked = std::numeric_limits<float>::lowest();  // as CTranslate2

// The prompt followed by the row's tokens, read as one sequence without copying.
struct JoinedTokens {
  std::span<const TokenId> head, tail;
  std::size_t size() const { return head.size() + tail.size(); }
  TokenId operator[](std::size_t i) const {
    return i < head.size() ? head[i] : tail[i - head.size()];
  }
};

// Whether the n-1 tokens at `start` equal the last n-1 tokens of the sequence.
bool matches_suffix(const JoinedTokens& seq, std::size_t start, std::size_t n) {
  const std::size_t suffix = seq.size() - (n - 1);
  for (std::size_t j = 0; j + 1 < n; ++j)
    if (seq[start + j] != seq[suffix + j]) return false;
  return true;
}

}  // namespace

LogitsProcessor::LogitsProcessor(const DecodingOptions& options, std::vector<TokenId> end_tokens,
                                 std::int32_t vocab_size)
    : repetition_penalty_(options.repetition_penalty),
      min_new_tokens_(options.min_new_tokens),
      ngram_size_(options.no_repeat_ngram_size),
      suppressed_(options.suppress_sequences),
      end_tokens_(std::move(end_tokens)) {
  // The stamps are only needed (and only paid for) when the penalty is on.
  if (repetition_penalty_ != 1.0) seen_.assign(static_cast<std::size_t>(vocab_size), 0);
}

void LogitsProcessor::apply(std::span<float> logits, std::span<const TokenId> context,
                            std::span<const TokenId> history) {
  if (repetition_penalty_ != 1.0) penalize_repetitions(logits, context, history);
  if (static_cast<std::int64_t>(history.size()) < min_new_tokens_) block_end_tokens(logits);
  if (ngram_size_ > 0) block_repeated_ngrams(logits, context, history);
  if (!suppressed_.empty()) suppress_sequences(logits, context, history);
}

// O(prompt + history), not O(vocab): each distinct token is penalized once per row, found
// through a per-token stamp instead of a cleared set.
void LogitsProcessor::penalize_repetitions(std::span<float> logits,
                                           std::span<const TokenId> context,
                                           std::span<const TokenId> history) {
  if (++stamp_ == 0) {  // wrapped around: old stamps could collide
    std::fill(seen_.begin(), seen_.end(), 0);
    stamp_ = 1;
  }
  for (TokenId t : context) penalize_once(logits, t);
  for (TokenId t : history) penalize_once(logits, t);
}

void LogitsProcessor::penalize_once(std::span<float> logits, TokenId token) {
  const auto t = static_cast<std::size_t>(token);
  if (t >= seen_.size() || seen_[t] == stamp_) return;
  seen_[t] = stamp_;
  const double x = logits[t];
  logits[t] = static_cast<float>(x > 0 ? x / repetition_penalty_ : x * repetition_penalty_);
}

void LogitsProcessor::block_end_tokens(std::span<float> logits) const {
  for (TokenId e : end_tokens_) logits[static_cast<std::size_t>(e)] = kBlocked;
}

// CTranslate2's NoRepeatNgram over prompt + history: wherever the last n-1 tokens occurred
// before, the token that followed them is blocked (n = 1 blocks every token seen).
void LogitsProcessor::block_repeated_ngrams(std::span<float> logits,
                                            std::span<const TokenId> context,
                                            std::span<const TokenId> history) const {
  const JoinedTokens seq{context, history};
  const auto n = static_cast<std::size_t>(ngram_size_);
  if (seq.size() < n) return;
  for (std::size_t start = 0; start + n <= seq.size(); ++start) {
    if (!matches_suffix(seq, start, n)) continue;
    const auto banned = static_cast<std::size_t>(seq[start + n - 1]);
    if (banned < logits.size()) logits[banned] = kBlocked;
  }
}

// CTranslate2's SuppressSequences over prompt + history: a sequence's last token is blocked
// when the tokens before it are the sequence's end (a one-token sequence: always).
void LogitsProcessor::suppress_sequences(std::span<float> logits, std::span<const TokenId> context,
                                         std::span<const TokenId> history) const {
  const JoinedTokens seq{context, history};
  for (const std::vector<TokenId>& banned : suppressed_) {
    const std::size_t n = banned.size() - 1;  // tokens that must precede
    if (seq.size() < n) continue;
    bool match = true;
    for (std::size_t j = 0; j < n && match; ++j) match = seq[seq.size() - n + j] == banned[j];
    const auto last = static_cast<std::size_t>(banned.back());
    if (match && last < logits.size()) logits[last] = kBlocked;
  }
}

}  // namespace masque::decoding

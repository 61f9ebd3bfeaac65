#include "fake_stepper.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include "masque/tensor.hpp"

namespace masque::test {

namespace {
constexpr std::size_t kMaxTokens = 5000;  // no test decodes more: a decoder that loops fails
}  // namespace

FakeStepper::FakeStepper(std::int32_t vocab, std::vector<FakeRecord> records, LogitsModel model,
                         std::vector<TokenId> default_end_tokens, bool fixed_length)
    : vocab_(vocab),
      records_(std::move(records)),
      model_(std::move(model)),
      default_end_tokens_(std::move(default_end_tokens)),
      fixed_length_(fixed_length) {
  for (std::int32_t r = 0; r < num_records(); ++r) rows_.push_back({r, {}});
}

std::int32_t FakeStepper::num_records() const {
  return static_cast<std::int32_t>(records_.size());
}
std::uint64_t FakeStepper::record_id(std::int32_t record) const {
  return records_.at(record).id;
}
std::span<const TokenId> FakeStepper::context(std::int32_t record) const {
  return records_.at(record).context;
}
std::span<const TokenId> FakeStepper::forced_prefix(std::int32_t record) const {
  return records_.at(record).prefix;
}
std::int32_t FakeStepper::max_steps(std::int32_t record) const {
  return records_.at(record).max_steps;
}

std::vector<TokenId> FakeStepper::history(const Row& row) const {
  std::vector<TokenId> h = records_[row.record].context;
  h.insert(h.end(), row.tokens.begin(), row.tokens.end());
  return h;
}

void FakeStepper::logits(Tensor& out) {
  if (rows_.empty()) throw std::logic_error("logits() with no rows");
  out.resize({static_cast<std::int64_t>(rows_.size()), vocab_});
  for (std::size_t i = 0; i < rows_.size(); ++i)
    model_(history(rows_[i]), std::span<float>(out.f32() + i * vocab_, vocab_));
  logits_given_ = true;
  rows_per_step_.push_back(rows_.size());
}

void FakeStepper::advance(std::span<const TokenId> tokens) {
  if (!logits_given_) throw std::logic_error("advance() without logits() first");
  if (tokens.size() != rows_.size())
    throw std::logic_error("advance() got " + std::to_string(tokens.size()) + " tokens for " +
                           std::to_string(rows_.size()) + " rows");
  for (std::size_t i = 0; i < rows_.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_) throw std::logic_error("token out of range");
    if (rows_[i].tokens.size() > kMaxTokens) throw std::logic_error("a row never stops");
    rows_[i].tokens.push_back(tokens[i]);
  }
  logits_given_ = false;
}

void FakeStepper::select(std::span<const std::int32_t> rows) {
  std::vector<Row> next;
  for (std::int32_t r : rows) {
    if (r < 0 || r >= static_cast<std::int32_t>(rows_.size()))
      throw std::logic_error("select() row " + std::to_string(r) + " out of range");
    next.push_back(rows_[r]);
  }
  rows_ = std::move(next);
}

LogitsModel bigram_model(std::map<TokenId, std::vector<double>> table) {
  return [table = std::move(table)](std::span<const TokenId> history, std::span<float> out) {
    const TokenId last = history.empty() ? -1 : history.back();
    const std::vector<double>& probs = table.at(last);
    for (std::size_t t = 0; t < out.size(); ++t) out[t] = static_cast<float>(std::log(probs.at(t)));
  };
}

namespace {
std::uint64_t mix(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

LogitsModel hashed_model(std::uint64_t seed) {
  return [seed](std::span<const TokenId> history, std::span<float> out) {
    std::uint64_t h = mix(seed);
    for (TokenId t : history) h = mix(h ^ static_cast<std::uint64_t>(t));
    for (std::size_t t = 0; t < out.size(); ++t)
      out[t] = static_cast<float>(
          static_cast<double>(mix(h ^ (t * 0x51ed27ull)) >> 11) * 0x1.0p-53 * 6.0 - 3.0);
  };
}

LogitsModel constant_model(std::vector<float> logits) {
  return [logits = std::move(logits)](std::span<const TokenId>, std::span<float> out) {
    for (std::size_t t = 0; t < out.size(); ++t) out[t] = logits.at(t);
  };
}

}  // namespace masque::test

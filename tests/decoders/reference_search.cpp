#include "reference_search.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

namespace masque::test {

namespace {

constexpr float kLowest = std::numeric_limits<float>::lowest();

bool is_end(const SearchSpec& spec, TokenId t) {
  return std::find(spec.end_tokens.begin(), spec.end_tokens.end(), t) != spec.end_tokens.end();
}

std::int32_t limit_of(const SearchSpec& spec, const FakeRecord& record) {
  const std::int32_t m = spec.options.max_new_tokens;
  return record.max_steps < 0 ? m : std::min(m, record.max_steps);
}

double plain_lse(const std::vector<float>& row) {
  const float max = *std::max_element(row.begin(), row.end());
  double sum = 0;
  for (float x : row) sum += std::exp(static_cast<double>(x) - max);
  return max + std::log(sum);
}

double plain_score(double sum, std::size_t length, double lp) {
  return length == 0 ? 0.0 : sum / std::pow(static_cast<double>(length), lp);
}

void sort_best_first(std::vector<Hypothesis>& hyps, std::size_t keep) {
  std::stable_sort(hyps.begin(), hyps.end(),
                   [](const Hypothesis& a, const Hypothesis& b) { return a.score > b.score; });
  if (hyps.size() > keep) hyps.resize(keep);
}

struct RefBeam {
  std::vector<TokenId> tokens;
  std::vector<float> logprobs;
  double score = 0;
};

struct RefCandidate {
  double score;
  float logprob;
  bool scored;
  std::size_t beam;
  TokenId token;
};

}  // namespace

std::vector<float> reference_logits(const SearchSpec& spec, const FakeRecord& record,
                                    const std::vector<TokenId>& tokens) {
  std::vector<TokenId> seq = record.context;
  seq.insert(seq.end(), tokens.begin(), tokens.end());
  std::vector<float> row(static_cast<std::size_t>(spec.vocab));
  spec.model(seq, row);
  const DecodingOptions& o = spec.options;
  if (o.repetition_penalty != 1.0) {
    for (TokenId t : std::set<TokenId>(seq.begin(), seq.end())) {
      const double x = row[t];
      row[t] = static_cast<float>(x > 0 ? x / o.repetition_penalty : x * o.repetition_penalty);
    }
  }
  if (static_cast<std::int32_t>(tokens.size()) < o.min_new_tokens)
    for (TokenId e : spec.end_tokens) row[e] = kLowest;
  const auto n = static_cast<std::size_t>(o.no_repeat_ngram_size);
  if (n > 0 && seq.size() >= n) {
    for (std::size_t i = 0; i + n <= seq.size(); ++i)
      if (std::equal(seq.begin() + i, seq.begin() + i + n - 1, seq.end() - (n - 1)))
        row[seq[i + n - 1]] = kLowest;
  }
  return row;
}

std::vector<Hypothesis> reference_beam(const SearchSpec& spec, const FakeRecord& record) {
  const std::int32_t limit = limit_of(spec, record);
  if (limit == 0) return {Hypothesis{}};
  const std::size_t K = spec.beam_size;
  const std::size_t P = record.prefix.size();
  const auto max_finished = static_cast<std::size_t>(
      std::round(static_cast<float>(spec.beam_size) * static_cast<float>(spec.patience)));
  std::vector<RefBeam> beams(2 * K > static_cast<std::size_t>(spec.vocab) ? K : 1);
  for (std::size_t b = 1; b < beams.size(); ++b) beams[b].score = kLowest;
  std::vector<Hypothesis> finished;
  bool top_finished = false;
  for (std::int32_t step = 0;; ++step) {
    const std::size_t C = std::min(2 * K, beams.size() * spec.vocab);
    std::vector<RefCandidate> cands;
    if (static_cast<std::size_t>(step) < P) {
      for (std::size_t k = 0; k < C; ++k)
        cands.push_back({k == 0 ? 0.0 : -1e10, 0.f, false, 0, record.prefix[step]});
    } else {
      std::vector<float> first_row;
      double first_lse = 0;
      for (std::size_t b = 0; b < beams.size(); ++b) {
        const std::vector<float> row = reference_logits(spec, record, beams[b].tokens);
        const double lse = plain_lse(row);
        if (b == 0) first_row = row, first_lse = lse;
        for (TokenId t = 0; t < spec.vocab; ++t)
          cands.push_back(
              {beams[b].score + (row[t] - lse), static_cast<float>(row[t] - lse), true, b, t});
      }
      std::stable_sort(cands.begin(), cands.end(),
                       [](const auto& a, const auto& b) { return a.score > b.score; });
      cands.resize(C);
      if (P > 0 && static_cast<std::size_t>(step) == P)
        for (std::size_t k = 1; k < C; ++k)
          if (is_end(spec, cands[k].token))
            cands[k] = {-1e10, static_cast<float>(first_row[0] - first_lse), true, 0, 0};
    }
    const bool last = step + 1 == limit;
    const std::size_t slots = std::min(K, C);
    std::size_t spare = slots;
    std::vector<RefBeam> next;
    for (std::size_t k = 0; k < slots; ++k) {
      std::size_t chosen = k;
      const RefCandidate& c = cands[k];
      const bool ended = static_cast<std::size_t>(step) >= P && is_end(spec, c.token);
      if (ended || last) {
        if (k == 0) top_finished = true;
        Hypothesis h;
        h.tokens = beams[c.beam].tokens;
        if (!ended) h.tokens.push_back(c.token);
        h.logprobs = beams[c.beam].logprobs;
        if (c.scored) h.logprobs.push_back(c.logprob);
        h.score = c.score;
        h.finished = ended;
        finished.push_back(h);
        for (; spare < C; ++spare)
          if (!is_end(spec, cands[spare].token)) {
            chosen = spare++;
            break;
          }
      }
      const RefCandidate& n = cands[chosen];
      RefBeam beam = beams[n.beam];
      beam.tokens.push_back(n.token);
      if (n.scored) beam.logprobs.push_back(n.logprob);
      beam.score = n.score;
      next.push_back(beam);
    }
    const bool done =
        last ||
        (spec.options.length_penalty == 0
             ? top_finished && finished.size() >= static_cast<std::size_t>(spec.num_hypotheses)
             : finished.size() >= max_finished);
    if (done) {
      for (Hypothesis& h : finished)
        h.score = plain_score(h.score, h.tokens.size() + h.finished, spec.options.length_penalty);
      sort_best_first(finished, spec.num_hypotheses);
      return finished;
    }
    beams = std::move(next);
  }
}

namespace {

void enumerate(const SearchSpec& spec, const FakeRecord& record, std::int32_t limit,
               const Hypothesis& partial, double sum, std::vector<Hypothesis>& out) {
  const std::int32_t step = static_cast<std::int32_t>(partial.tokens.size());
  const std::vector<float> row = reference_logits(spec, record, partial.tokens);
  const double lse = plain_lse(row);
  for (TokenId t = 0; t < spec.vocab; ++t) {
    Hypothesis h = partial;
    const double lp = row[t] - lse;
    h.logprobs.push_back(static_cast<float>(lp));
    h.finished = is_end(spec, t);
    if (!h.finished) h.tokens.push_back(t);
    if (h.finished || step + 1 == limit) {
      h.score = plain_score(sum + lp, h.tokens.size() + h.finished, spec.options.length_penalty);
      out.push_back(h);
    } else {
      enumerate(spec, record, limit, h, sum + lp, out);
    }
  }
}

}  // namespace

std::vector<Hypothesis> brute_force(const SearchSpec& spec, const FakeRecord& record,
                                    std::size_t keep) {
  std::vector<Hypothesis> all;
  enumerate(spec, record, limit_of(spec, record), Hypothesis{}, 0.0, all);
  sort_best_first(all, keep);
  return all;
}

}  // namespace masque::test

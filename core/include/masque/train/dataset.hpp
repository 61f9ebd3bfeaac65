// Training data: the usable records of a file, the order of each epoch and its batches.
//
// A record that cannot be used (invalid UTF-8, bad JSON, too long, empty target, ...) is
// skipped, reported on stderr with its line number and counted by reason; past `max_bad` skips
// the run stops with a ConfigError (exit 2). Nothing is dropped silently.
//
// Batches are deterministic: with shuffling off, batch k of an epoch of batch size N is examples
// kN ... kN+N-1 in file order; with shuffling on, the epoch's order is a Fisher-Yates permutation
// drawn from SplitMix64 (random.hpp) seeded by mix_seed(seed, epoch), the same on every platform.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <boost/config.hpp>

#include "masque/random.hpp"
#include "masque/tokenizer.hpp"

namespace masque {
struct Record;
struct InputOptions;
}  // namespace masque

namespace masque::train {

// One usable record, tokenized and laid out by the objective.
struct Example {
  std::uint64_t line = 0;              // 1-based line number in its file
  std::vector<TokenId> ids;            // the model's input tokens (the source of an enc-dec)
  std::vector<std::int32_t> segments;  // per token of `ids` (UniLM), or empty
  std::vector<TokenId> target;         // an encoder-decoder's target, or empty
  std::vector<std::int32_t> order;     // the record's factorization order (plm), or empty
  std::vector<std::uint8_t> context;   // plm: 1 = given, outside the order; or empty (none)
  std::int32_t label = -1;             // classify: the record's label index
  std::int64_t tokens() const { return static_cast<std::int64_t>(ids.size() + target.size()); }
};

struct Skip {
  std::uint64_t line = 0;
  std::string reason;
};

// Counts skipped records by reason and enforces the limit.
class BOOST_SYMBOL_VISIBLE SkipLog {
 public:
  // `max_bad` < 0: no limit. `report` receives one line per skip (default: stderr).
  SkipLog(std::string file, std::int64_t max_bad,
          std::function<void(const std::string&)> report = {});

  // Records a skip; throws ConfigError when it is one more than max_bad.
  void skip(std::uint64_t line, std::string reason);
  std::int64_t count() const { return static_cast<std::int64_t>(skipped_.size()); }
  const std::vector<Skip>& skipped() const { return skipped_; }
  // "3 of 1000 records skipped (2 invalid UTF-8, 1 empty target)", or "" when none.
  std::string summary(std::int64_t total) const;

 private:
  std::string file_;
  std::int64_t max_bad_;
  std::function<void(const std::string&)> report_;
  std::vector<Skip> skipped_;
  std::map<std::string, std::int64_t> by_kind_;
};

// Turns one record into an example; throws RecordError for a record it cannot use.
using PrepareExample = std::function<Example(const Record&)>;

// Reads every record of `file` (text lines, TSV, JSON lines as `masque run` reads them) and keeps
// the ones `prepare` accepts. Unreadable files are ConfigErrors naming them.
BOOST_SYMBOL_VISIBLE std::vector<Example> load_examples(const std::string& file,
                                                        const InputOptions& input,
                                                        const PrepareExample& prepare,
                                                        SkipLog& skips);

// The order in which epoch `epoch` visits n examples.
BOOST_SYMBOL_VISIBLE std::vector<std::uint32_t> epoch_order(std::size_t n, std::uint64_t seed,
                                                            std::int64_t epoch, bool shuffle);

// A batch: examples order[begin .. end) of its epoch.
struct BatchSpan {
  std::size_t begin = 0, end = 0;
};

// Cuts an epoch into batches of `batch_size` examples (the last may be shorter) or, when
// max_tokens > 0, of as many examples as fit in max_tokens padded tokens (count x longest) and,
// when batch_size > 0 too, no more than batch_size; an example longer than the budget makes a
// batch alone.
BOOST_SYMBOL_VISIBLE std::vector<BatchSpan> cut_batches(const std::vector<std::uint32_t>& order,
                                                        const std::vector<Example>& examples,
                                                        std::size_t batch_size,
                                                        std::int64_t max_tokens);

}  // namespace masque::train

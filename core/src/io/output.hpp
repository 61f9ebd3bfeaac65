// Output records: JSON lines (default), plain text, TSV, or n-best lines.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace masque {

enum class OutputFormat { jsonl, text, tsv, nbest };

OutputFormat parse_output_format(const std::string& name);  // ConfigError on unknown names

struct NBestEntry {
  std::string text;
  double score = 0.0;
};

// The outcome for one input record, produced by a task.
struct Result {
  std::uint64_t id = 0;
  nlohmann::ordered_json object;       // the JSON-lines record ("id" first)
  std::string text;                    // the main text, for --format text / tsv / nbest
  std::vector<NBestEntry> nbest;       // hypotheses (best first) for --format nbest
  std::string error;                   // non-empty: the record failed
  std::uint64_t tokens = 0;            // tokens processed, for throughput
  nlohmann::ordered_json fields_kept;  // the input fields (set by the runner for --keep-fields)
};

Result error_result(std::uint64_t id, const std::string& message);

// Renders a Result as the bytes of its output record(s), each ending with '\n'.
std::string render(const Result& result, OutputFormat format,
                   const std::vector<std::string>& tsv_columns);

// Writes rendered records whole; reports a closed or failing output instead of crashing.
class OutputWriter {
 public:
  OutputWriter(std::FILE* out, bool unbuffered) : out_(out), unbuffered_(unbuffered) {}
  // False when the output is gone (EPIPE, disk full): stop the run.
  bool write(const std::string& bytes);
  bool flush();
  const std::string& error() const { return error_; }

 private:
  std::FILE* out_;
  bool unbuffered_;
  std::string error_;
};

}  // namespace masque

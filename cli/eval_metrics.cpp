#include "eval_metrics.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <sstream>

#include "masque/error.hpp"

namespace masque::eval {

std::size_t edit_distance(const Tokens& a, const Tokens& b) {
  // One row of the dynamic-programming table at a time.
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t substitute = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({substitute, row[j] + 1, row[j - 1] + 1});
    }
  }
  return row[b.size()];
}

WordScore score_word(const Tokens& hypothesis, const std::vector<Tokens>& references) {
  WordScore best;
  bool first = true;
  for (const Tokens& ref : references) {
    const std::size_t edits = edit_distance(hypothesis, ref);
    if (first || edits < best.edits) best = {edits == 0, edits, ref.size()};
    first = false;
  }
  return best;
}

void Tally::add(const WordScore& s) {
  ++words;
  correct += s.correct ? 1 : 0;
  edits += s.edits;
  ref_tokens += s.ref_length;
}

double Tally::wer() const {
  return words ? static_cast<double>(words - correct) / static_cast<double>(words) : 0.0;
}

double Tally::ter() const {
  return ref_tokens ? static_cast<double>(edits) / static_cast<double>(ref_tokens) : 0.0;
}

LengthUnit parse_length_unit(const std::string& name) {
  if (name == "auto") return LengthUnit::automatic;
  if (name == "chars") return LengthUnit::chars;
  if (name == "tokens") return LengthUnit::tokens;
  throw ConfigError("--length-unit: '" + name + "' is not one of auto, chars, tokens");
}

std::size_t source_length(const std::string& key, LengthUnit unit) {
  if (unit == LengthUnit::tokens ||
      (unit == LengthUnit::automatic && key.find(' ') != std::string::npos))
    return split_tokens(key).size();
  // UTF-8 code points: every byte that is not a continuation byte starts one.
  return static_cast<std::size_t>(std::count_if(key.begin(), key.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

std::string Bucket::label() const {
  if (max == 0) return std::to_string(min) + "+";
  if (max == min) return std::to_string(min);
  return std::to_string(min) + "-" + std::to_string(max);
}

std::vector<Bucket> make_buckets(const std::vector<std::size_t>& upper_bounds) {
  std::vector<Bucket> buckets;
  std::size_t min = 1;  // a key is never empty
  for (std::size_t bound : upper_bounds) {
    buckets.push_back({min, bound, {}});
    min = bound + 1;
  }
  buckets.push_back({min, 0, {}});
  return buckets;
}

std::vector<std::size_t> parse_bounds(const std::string& text) {
  std::vector<std::size_t> bounds;
  if (text.empty()) return bounds;
  const ConfigError bad("--buckets: '" + text +
                        "' is not a list of increasing positive integers (e.g. 4,6,8)");
  if (text.back() == ',') throw bad;  // getline drops an empty last field
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::size_t used = 0;
    long long value = -1;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || item.empty() || value < 1 ||
        (!bounds.empty() && static_cast<std::size_t>(value) <= bounds.back()))
      throw bad;
    bounds.push_back(static_cast<std::size_t>(value));
  }
  return bounds;
}

Report evaluate(const References& refs, const Hypotheses& hyps,
                const std::vector<std::size_t>& upper_bounds, LengthUnit unit) {
  Report report;
  report.buckets = make_buckets(upper_bounds);
  report.error_records = hyps.error_records;
  for (std::size_t w = 0; w < refs.words.size(); ++w) {
    const WordScore s = score_word(hyps.tokens.at(w), refs.words[w].alternatives);
    report.overall.add(s);
    const std::size_t length = source_length(refs.words[w].key, unit);
    if (length == 0)
      throw ConfigError(refs.file + ":" + std::to_string(refs.words[w].line) +
                        ": the key has no source tokens");
    for (Bucket& b : report.buckets)
      if (length >= b.min && (b.max == 0 || length <= b.max)) {
        b.tally.add(s);
        break;
      }
  }
  return report;
}

namespace {

std::string row(const std::string& label, const Tally& t) {
  char line[160];
  if (t.words == 0) {
    std::snprintf(line, sizeof line, "%-14s %8zu %8s %8s %9s %11s %8s\n", label.c_str(), t.words,
                  "-", "-", "-", "-", "-");
  } else {
    std::snprintf(line, sizeof line, "%-14s %8zu %8zu %8.2f %9zu %11zu %8.2f\n", label.c_str(),
                  t.words, t.correct, 100.0 * t.wer(), t.edits, t.ref_tokens, 100.0 * t.ter());
  }
  return line;
}

nlohmann::ordered_json tally_json(const Tally& t) {
  nlohmann::ordered_json j;
  j["words"] = t.words;
  j["correct"] = t.correct;
  // No words, no rate: null rather than a 0 that reads as perfect.
  j["wer"] = t.words ? nlohmann::ordered_json(t.wer()) : nlohmann::ordered_json();
  j["edits"] = t.edits;
  j["ref_tokens"] = t.ref_tokens;
  j["ter"] = t.words ? nlohmann::ordered_json(t.ter()) : nlohmann::ordered_json();
  return j;
}

}  // namespace

std::string format_text(const Report& report, const std::string& token_name) {
  const std::string rate =
      std::string(1,
                  static_cast<char>(std::toupper(static_cast<unsigned char>(token_name.at(0))))) +
      "ER";
  char header[160];
  std::snprintf(header, sizeof header, "%-14s %8s %8s %8s %9s %11s %8s\n", "", "words", "correct",
                "WER %", "edits", ("ref " + token_name + "s").c_str(), (rate + " %").c_str());
  std::string out = header;
  out += row("all", report.overall);
  for (const Bucket& b : report.buckets) out += row("length " + b.label(), b.tally);
  if (report.error_records)
    out += std::to_string(report.error_records) +
           " hypotheses were error records, scored as empty (every reference " + token_name +
           " deleted)\n";
  return out;
}

nlohmann::ordered_json to_json(const Report& report) {
  nlohmann::ordered_json j = tally_json(report.overall);
  j["error_records"] = report.error_records;
  auto buckets = nlohmann::ordered_json::array();
  for (const Bucket& b : report.buckets) {
    nlohmann::ordered_json bj;
    bj["length"] = b.label();
    bj["min"] = b.min;
    bj["max"] = b.max == 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(b.max);
    const nlohmann::ordered_json tally = tally_json(b.tally);
    for (const auto& [k, v] : tally.items()) bj[k] = v;
    buckets.push_back(bj);
  }
  j["by_length"] = buckets;
  return j;
}

}  // namespace masque::eval

#include "eval_data.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include <nlohmann/json.hpp>

#include "masque/error.hpp"

namespace masque::eval {

namespace {

// The lines of `text` (a final '\n' ends the last line, it does not start an empty one),
// without a trailing '\r'.
std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    pos = end + 1;
  }
  return lines;
}

std::vector<std::string_view> split_tabs(std::string_view line) {
  std::vector<std::string_view> fields;
  std::size_t pos = 0;
  while (true) {
    const std::size_t tab = line.find('\t', pos);
    fields.push_back(line.substr(pos, tab == std::string_view::npos ? tab : tab - pos));
    if (tab == std::string_view::npos) return fields;
    pos = tab + 1;
  }
}

[[noreturn]] void fail(const std::string& file, std::size_t line, const std::string& what) {
  throw ConfigError(file + ":" + std::to_string(line) + ": " + what);
}

std::string shorten(std::string_view s) {
  return s.size() <= 60 ? std::string(s) : std::string(s.substr(0, 57)) + "...";
}

void add_reference_line(References& refs, std::string_view line, std::size_t n) {
  const std::vector<std::string_view> fields = split_tabs(line);
  if (fields[0].empty()) fail(refs.file, n, "empty key (expected key<TAB>reference...)");
  if (fields.size() < 2)
    fail(refs.file, n,
         "no reference after the key '" + shorten(fields[0]) +
             "' (expected key<TAB>reference<TAB>reference...)");
  const std::string key(fields[0]);
  auto [it, added] = refs.index.emplace(key, refs.words.size());
  if (added) refs.words.push_back({key, n, {}});
  Reference& word = refs.words[it->second];
  for (std::size_t f = 1; f < fields.size(); ++f) {
    Tokens tokens = split_tokens(fields[f]);
    if (tokens.empty())
      fail(refs.file, n, "reference " + std::to_string(f) + " of '" + shorten(key) + "' is empty");
    bool seen = false;
    for (const Tokens& t : word.alternatives) seen = seen || t == tokens;
    if (!seen) word.alternatives.push_back(std::move(tokens));
  }
}

// "line N" of the hypotheses, or "the end" when the file has fewer lines than words.
std::string missing_hypothesis(const References& refs, std::size_t count, const std::string& file) {
  const Reference& word = refs.words[count];
  return file + ": " + std::to_string(count) + " hypotheses for " +
         std::to_string(refs.words.size()) + " words of " + refs.file +
         " (hypotheses are matched to words by line): no hypothesis for '" + shorten(word.key) +
         "' (" + refs.file + ":" + std::to_string(word.line) + ")";
}

void check_count(const References& refs, std::size_t lines, const std::string& file) {
  if (lines < refs.words.size()) throw ConfigError(missing_hypothesis(refs, lines, file));
  if (lines > refs.words.size())
    fail(file, refs.words.size() + 1,
         "more hypotheses than the " + std::to_string(refs.words.size()) + " words of " +
             refs.file + " (hypotheses are matched to words by line)");
}

Hypotheses parse_text(const std::vector<std::string_view>& lines, const std::string& file,
                      const References& refs) {
  check_count(refs, lines.size(), file);
  Hypotheses hyps;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find('\t') != std::string_view::npos)
      fail(file, i + 1, "a tab in a text hypothesis (use --hyp-format tsv for key<TAB>hypothesis)");
    hyps.tokens.push_back(split_tokens(lines[i]));
  }
  return hyps;
}

Tokens json_tokens(const nlohmann::json& value, const std::string& file, std::size_t n,
                   const std::string& field) {
  if (value.is_string()) return split_tokens(value.get<std::string>());
  if (value.is_array()) {
    Tokens tokens;
    for (const auto& t : value) {
      if (!t.is_string()) fail(file, n, "field '" + field + "' is an array with a non-string");
      tokens.push_back(t.get<std::string>());
    }
    return tokens;
  }
  fail(file, n, "field '" + field + "' is neither a string nor an array of strings");
}

Hypotheses parse_jsonl(const std::vector<std::string_view>& lines, const std::string& file,
                       const std::string& field, const References& refs) {
  check_count(refs, lines.size(), file);
  const bool pointer = !field.empty() && field.front() == '/';
  Hypotheses hyps;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::size_t n = i + 1;
    nlohmann::json record = nlohmann::json::parse(lines[i], nullptr, /*allow_exceptions=*/false);
    if (!record.is_object()) fail(file, n, "not a JSON object: " + shorten(lines[i]));
    // masque run numbers records from 0 in input order: a gap means a lost or extra record.
    if (record.contains("id") && record["id"].is_number_integer() && record["id"] != i)
      fail(file, n,
           "record id " + record["id"].dump() + " where " + std::to_string(i) +
               " was expected (records must be in the references' order)");
    if (record.contains("error") && !record.contains(field)) {
      hyps.tokens.emplace_back();
      ++hyps.error_records;
      continue;
    }
    const nlohmann::json* value = nullptr;
    if (pointer) {
      nlohmann::json::json_pointer ptr;
      try {
        ptr = nlohmann::json::json_pointer(field);
      } catch (const nlohmann::json::exception& e) {
        throw ConfigError("--field '" + field + "': not a JSON pointer: " + e.what());
      }
      try {  // a path through an array with a non-numeric step may throw
        if (record.contains(ptr)) value = &record.at(ptr);
      } catch (const nlohmann::json::exception&) {
        value = nullptr;
      }
    } else if (record.contains(field)) {
      value = &record[field];
    }
    if (!value) fail(file, n, "no field '" + field + "' (choose one with --field)");
    hyps.tokens.push_back(json_tokens(*value, file, n, field));
  }
  return hyps;
}

Hypotheses parse_tsv(const std::vector<std::string_view>& lines, const std::string& file,
                     const References& refs) {
  Hypotheses hyps;
  hyps.tokens.resize(refs.words.size());
  std::vector<std::size_t> line_of(refs.words.size(), 0);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::size_t n = i + 1;
    const std::vector<std::string_view> fields = split_tabs(lines[i]);
    if (fields.size() > 2) fail(file, n, "more than two columns (expected key<TAB>hypothesis)");
    const auto it = refs.index.find(std::string(fields[0]));
    if (it == refs.index.end())
      fail(file, n, "the key '" + shorten(fields[0]) + "' is not in " + refs.file);
    if (line_of[it->second])
      fail(file, n,
           "a second hypothesis for '" + shorten(fields[0]) + "' (the first is on line " +
               std::to_string(line_of[it->second]) + ")");
    line_of[it->second] = n;
    if (fields.size() == 2) hyps.tokens[it->second] = split_tokens(fields[1]);
  }
  for (std::size_t w = 0; w < refs.words.size(); ++w)
    if (!line_of[w])
      throw ConfigError(file + ": no hypothesis for '" + shorten(refs.words[w].key) + "' (" +
                        refs.file + ":" + std::to_string(refs.words[w].line) + ")");
  return hyps;
}

}  // namespace

Tokens split_tokens(std::string_view text) {
  Tokens tokens;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find(' ', pos);
    if (end == std::string_view::npos) end = text.size();
    if (end > pos) tokens.emplace_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  return tokens;
}

References parse_references(std::string_view text, const std::string& file) {
  References refs;
  refs.file = file;
  const std::vector<std::string_view> lines = split_lines(text);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].empty()) fail(file, i + 1, "empty line (expected key<TAB>reference...)");
    add_reference_line(refs, lines[i], i + 1);
  }
  if (refs.words.empty()) throw ConfigError(file + ": no references (the file is empty)");
  return refs;
}

HypFormat parse_hyp_format(const std::string& name) {
  if (name == "auto") return HypFormat::automatic;
  if (name == "text") return HypFormat::text;
  if (name == "jsonl") return HypFormat::jsonl;
  if (name == "tsv") return HypFormat::tsv;
  throw ConfigError("--hyp-format: '" + name + "' is not one of auto, text, jsonl, tsv");
}

Hypotheses parse_hypotheses(std::string_view text, const std::string& file, HypFormat format,
                            const std::string& field, const References& refs) {
  const std::vector<std::string_view> lines = split_lines(text);
  if (lines.empty()) throw ConfigError(file + ": no hypotheses (the file is empty)");
  if (format == HypFormat::automatic)
    format = !lines[0].empty() && lines[0][0] == '{' ? HypFormat::jsonl : HypFormat::text;
  switch (format) {
    case HypFormat::jsonl:
      return parse_jsonl(lines, file, field, refs);
    case HypFormat::tsv:
      return parse_tsv(lines, file, refs);
    default:
      return parse_text(lines, file, refs);
  }
}

std::string read_whole_file(const std::string& path) {
  if (path == "-") {
    std::ostringstream s;
    s << std::cin.rdbuf();
    return s.str();
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw ConfigError(path + ": is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path + ": cannot open: " + std::strerror(errno));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw ConfigError(path + ": read error");
  return text;
}

}  // namespace masque::eval

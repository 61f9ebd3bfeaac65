#include "io/bounded_yaml.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>

#include "io/records.hpp"
#include "masque/error.hpp"

namespace masque::io {

namespace {

[[noreturn]] void fail(const std::string& where, const YAML::Mark& mark, const std::string& what) {
  throw ConfigError(yaml_mark_text(where, mark) + ": invalid YAML: " + what);
}

YAML::Mark mark_at(std::string_view text, std::size_t offset) {
  YAML::Mark mark;
  mark.pos = static_cast<int>(offset);
  mark.line = static_cast<int>(std::count(text.begin(), text.begin() + offset, '\n'));
  const std::size_t line_start = text.rfind('\n', offset == 0 ? 0 : offset - 1);
  mark.column = static_cast<int>(
      offset == 0 || line_start == std::string_view::npos ? offset : offset - line_start - 1);
  return mark;
}

// The offset and code point of the first character YAML 1.2 does not allow in a stream (its
// c-printable set: tab, line breaks, U+0020-U+007E, U+0085, U+00A0-U+D7FF, U+E000-U+FFFD,
// U+10000 and up), or npos. `text` is valid UTF-8.
std::pair<std::size_t, std::uint32_t> first_unprintable(std::string_view text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (b < 0x20 && b != '\t' && b != '\n' && b != '\r') return {i, b};
    if (b == 0x7f) return {i, b};
    if (b == 0xc2 && i + 1 < text.size()) {  // C1 controls U+0080-U+009F, but U+0085 (NEL)
      const auto c = static_cast<unsigned char>(text[i + 1]);
      if (c >= 0x80 && c <= 0x9f && c != 0x85) return {i, c};
    }
    if (b == 0xef && i + 2 < text.size() && static_cast<unsigned char>(text[i + 1]) == 0xbf) {
      const auto c = static_cast<unsigned char>(text[i + 2]);
      if (c == 0xbe || c == 0xbf) return {i, 0xffc0u + (c & 0x3fu)};  // U+FFFE, U+FFFF
    }
  }
  return {std::string_view::npos, 0};
}

std::string code_point_text(std::uint32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", cp);
  return buf;
}

void check_characters(const std::string& text, const std::string& where) {
  if (const std::size_t bad = first_invalid_utf8(text); bad < text.size())
    fail(where, mark_at(text, bad), "not UTF-8 (byte " + std::to_string(bad) + ")");
  if (const auto [at, cp] = first_unprintable(text); at != std::string_view::npos)
    fail(where, mark_at(text, at),
         "control character " + code_point_text(cp) +
             " (YAML allows printable characters, tabs and line breaks only)");
}

// Counts a document's nodes as building them would make them (an alias as the size of what it
// names), and notes how far into the text its events reach.
class NodeCounter : public YAML::EventHandler {
 public:
  NodeCounter(const std::string& where, std::size_t max_nodes)
      : where_(where), max_nodes_(max_nodes) {}

  std::size_t reach() const { return reach_; }
  void start_document() { reach_ = 0; }

  void OnDocumentStart(const YAML::Mark& mark) override { see(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override { leaf(mark, anchor); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    see(mark);
    const auto it = sizes_.find(anchor);
    add(it == sizes_.end() ? 1 : it->second, mark);
  }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                const std::string&) override {
    leaf(mark, anchor);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open(mark, anchor);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    open(mark, anchor);
  }
  void OnMapEnd() override { close(); }

 private:
  void see(const YAML::Mark& mark) {
    if (mark.pos >= 0) reach_ = std::max(reach_, static_cast<std::size_t>(mark.pos) + 1);
  }
  void add(std::size_t n, const YAML::Mark& mark) {
    nodes_ += n;
    if (nodes_ > max_nodes_)
      fail(
          where_, mark,
          "more than " + std::to_string(max_nodes_) + " nodes (aliases counted as what they name)");
  }
  void leaf(const YAML::Mark& mark, YAML::anchor_t anchor) {
    see(mark);
    add(1, mark);
    if (anchor) sizes_[anchor] = 1;
  }
  void open(const YAML::Mark& mark, YAML::anchor_t anchor) {
    see(mark);
    add(1, mark);
    open_.emplace_back(anchor, nodes_);
  }
  void close() {
    if (open_.empty()) return;
    const auto [anchor, start] = open_.back();
    open_.pop_back();
    if (anchor) sizes_[anchor] = nodes_ - start + 1;
  }

  const std::string& where_;
  std::size_t max_nodes_;
  std::size_t nodes_ = 0;
  std::size_t reach_ = 0;
  std::vector<std::pair<YAML::anchor_t, std::size_t>> open_;
  std::map<YAML::anchor_t, std::size_t> sizes_;
};

// How many documents `text` holds, within the limits. yaml-cpp's parser reports a document it
// could not advance past as an empty one, again and again: a document that reaches no further
// than the one before it ends the count with an error at that place.
std::size_t count_documents(const std::string& text, const std::string& where,
                            const YamlLimits& limits) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  NodeCounter counter(where, limits.max_nodes);
  std::size_t documents = 0;
  std::size_t reached = 0;
  while (documents < limits.max_documents) {
    counter.start_document();
    if (!parser.HandleNextDocument(counter)) break;
    if (documents > 0 && counter.reach() <= reached) {
      const std::size_t at = std::min(reached == 0 ? 0 : reached - 1, text.size());
      const std::string near =
          at < text.size() ? " at '" + std::string(1, text[at]) + "'" : std::string();
      fail(where, mark_at(text, at), "the parser cannot go on" + near);
    }
    reached = std::max(reached, counter.reach());
    ++documents;
  }
  return documents;
}

}  // namespace

std::string yaml_mark_text(const std::string& where, const YAML::Mark& mark) {
  if (mark.line < 0) return where;
  return where + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

YamlDocuments load_bounded_yaml(const std::string& text, const std::string& where,
                                const YamlLimits& limits) {
  if (text.size() > limits.max_bytes)
    throw ConfigError(where + ": invalid YAML: " + std::to_string(text.size()) +
                      " bytes, more than the " + std::to_string(limits.max_bytes) +
                      " a pipeline file may hold");
  check_characters(text, where);
  YamlDocuments out;
  try {
    out.count = count_documents(text, where, limits);
    if (out.count > 0) out.first = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    fail(where, e.mark, e.msg);
  }
  return out;
}

}  // namespace masque::io

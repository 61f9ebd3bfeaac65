#include "pre_tokenizers.hpp"

#include <algorithm>

#include <unicode/uchar.h>

#include "pretokenizer.hpp"  // the GPT-2 scanner of the bpe plugin
#include "regex.hpp"
#include "utf8.hpp"

namespace masque::hfjson {

namespace {

using masque::tok::decode_utf8;

enum class Behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

Behavior parse_behavior(const Node& node) {
  const std::string b = node.str();
  if (b == "Removed") return Behavior::removed;
  if (b == "Isolated") return Behavior::isolated;
  if (b == "MergedWithPrevious") return Behavior::merged_with_previous;
  if (b == "MergedWithNext") return Behavior::merged_with_next;
  if (b == "Contiguous") return Behavior::contiguous;
  node.fail("unknown split behavior '" + b +
            "' (Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous)");
}

struct Part {
  std::size_t begin, end;
  bool match;
};

// The whole text as alternating non-matches and matches (NormalizedString::split's input).
void cover(std::size_t size, const std::vector<Span>& matches, bool invert,
           std::vector<Part>& parts) {
  parts.clear();
  if (size == 0) {
    parts.push_back({0, 0, false});
    return;
  }
  std::size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (prev != b) parts.push_back({prev, b, invert});
    parts.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != size) parts.push_back({prev, size, invert});
}

// Applies `behavior` to `parts` of `n` and appends the non-empty results to `out`.
void split_parts(const Normalized& n, const std::vector<Part>& parts, Behavior behavior,
                 std::vector<Normalized>& out) {
  struct Cut {
    std::size_t begin, end;
    bool remove;
  };
  std::vector<Cut> cuts;
  cuts.reserve(parts.size());
  bool previous_match = false;
  switch (behavior) {
    case Behavior::isolated:
      for (const Part& p : parts) cuts.push_back({p.begin, p.end, false});
      break;
    case Behavior::removed:
      for (const Part& p : parts) cuts.push_back({p.begin, p.end, p.match});
      break;
    case Behavior::contiguous:
      for (const Part& p : parts) {
        if (p.match == previous_match && !cuts.empty())
          cuts.back().end = p.end;
        else
          cuts.push_back({p.begin, p.end, false});
        previous_match = p.match;
      }
      break;
    case Behavior::merged_with_previous:
      for (const Part& p : parts) {
        if (p.match && !previous_match && !cuts.empty())
          cuts.back().end = p.end;
        else
          cuts.push_back({p.begin, p.end, false});
        previous_match = p.match;
      }
      break;
    case Behavior::merged_with_next:
      for (std::size_t k = parts.size(); k-- > 0;) {
        const Part& p = parts[k];
        if (p.match && !previous_match && !cuts.empty())
          cuts.back().begin = p.begin;
        else
          cuts.push_back({p.begin, p.end, false});
        previous_match = p.match;
      }
      std::reverse(cuts.begin(), cuts.end());
      break;
  }
  for (const Cut& c : cuts)
    if (!c.remove && c.end > c.begin) out.push_back(n.slice(c.begin, c.end));
}

// Every character for which `pred` holds is a match of its own.
template <class Pred>
void char_matches(const std::string& s, Pred&& pred, std::vector<Span>& out) {
  for (std::size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    int len = decode_utf8(s, i, cp);
    if (len == 0) len = 1;
    if (pred(cp)) out.emplace_back(i, i + static_cast<std::size_t>(len));
    i += static_cast<std::size_t>(len);
  }
}

bool is_whitespace(char32_t c) {
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE) != 0;
}
bool is_punctuation(char32_t c) {
  if (c < 0x80)
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
           (c >= 123 && c <= 126);
  return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_P_MASK) != 0;
}
bool is_numeric(char32_t c) {
  return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_N_MASK) != 0;
}

// A pre-tokenizer that splits each piece by a list of matches and a behavior.
class MatchSplitter : public PreTokenizer {
 public:
  void split(std::vector<Normalized>& pieces) const override {
    std::vector<Normalized> out;
    out.reserve(pieces.size() * 4);
    std::vector<Span> matches;
    std::vector<Part> parts;
    for (const Normalized& n : pieces) {
      matches.clear();
      find(n.text, matches);
      cover(n.text.size(), matches, invert_, parts);
      split_parts(n, parts, behavior_, out);
    }
    pieces = std::move(out);
  }

 protected:
  virtual void find(const std::string& text, std::vector<Span>& out) const = 0;
  Behavior behavior_ = Behavior::isolated;
  bool invert_ = false;
};

class Split final : public MatchSplitter {
 public:
  explicit Split(const Node& node) : pattern_(node.at("pattern")) {
    behavior_ = parse_behavior(node.at("behavior"));
    invert_ = node.boolean("invert", false);
  }

 private:
  void find(const std::string& text, std::vector<Span>& out) const override {
    pattern_.find_all(text, out);
  }
  Pattern pattern_;
};

template <class Pred>
class CharSplit final : public MatchSplitter {
 public:
  CharSplit(Pred pred, Behavior behavior) : pred_(pred) { behavior_ = behavior; }

 private:
  void find(const std::string& text, std::vector<Span>& out) const override {
    char_matches(text, pred_, out);
  }
  Pred pred_;
};
template <class Pred>
std::unique_ptr<PreTokenizer> char_split(Pred pred, Behavior behavior) {
  return std::make_unique<CharSplit<Pred>>(pred, behavior);
}

// Whitespace: keeps the matches of \w+|[^\w\s]+ (Hugging Face: Invert + Removed).
class Whitespace final : public MatchSplitter {
 public:
  Whitespace() : regex_(R"(\w+|[^\w\s]+)") {
    behavior_ = Behavior::removed;
    invert_ = true;
  }

 private:
  void find(const std::string& text, std::vector<Span>& out) const override {
    regex_.find_all(text, out);
  }
  Regex regex_;
};

class ByteLevel final : public PreTokenizer {
 public:
  explicit ByteLevel(const Node& node)
      : add_prefix_space_(node.boolean("add_prefix_space", true)),
        use_regex_(node.boolean("use_regex", true)) {}
  void split(std::vector<Normalized>& pieces) const override {
    std::vector<Normalized> out;
    std::vector<masque::bpe::Piece> spans;
    for (Normalized& n : pieces) {
      if (add_prefix_space_ && (n.text.empty() || n.text[0] != ' ')) {
        NormalizedBuilder b(n);
        b.replace(0, 0, " ");
        b.keep(0, n.text.size());
        n = b.finish();
      }
      if (!use_regex_) {
        if (!n.empty()) out.push_back(std::move(n));
        continue;
      }
      spans.clear();
      masque::bpe::split_gpt2(n.text, spans);
      for (const auto& [b, e] : spans)
        if (e > b) out.push_back(n.slice(b, e));
    }
    pieces = std::move(out);
  }
  bool byte_level() const override { return true; }

 private:
  bool add_prefix_space_, use_regex_;
};

class Metaspace final : public PreTokenizer {
 public:
  explicit Metaspace(const Node& node) {
    const Node replacement = node.get("replacement");
    if (replacement.is_null())
      replacement_ = "\xE2\x96\x81";
    else
      masque::tok::append_utf8(replacement_, replacement.one_char());
    split_ = node.boolean("split", true);
    const Node scheme = node.get("prepend_scheme");
    if (!scheme.is_null()) {
      const std::string s = scheme.str();
      if (s == "always")
        prepend_ = Prepend::always;
      else if (s == "first")
        prepend_ = Prepend::first;
      else if (s == "never")
        prepend_ = Prepend::never;
      else
        scheme.fail("unknown prepend_scheme '" + s + "' (always, first, never)");
    } else {
      prepend_ = node.boolean("add_prefix_space", true) ? Prepend::always : Prepend::never;
    }
  }
  void split(std::vector<Normalized>& pieces) const override {
    std::vector<Normalized> out;
    std::vector<Span> matches;
    std::vector<Part> parts;
    for (Normalized& n : pieces) {
      NormalizedBuilder b(n);
      std::size_t pos = 0;
      for (std::size_t p = n.text.find(' '); p != std::string::npos; p = n.text.find(' ', p + 1)) {
        b.keep(pos, p);
        b.replace(p, p + 1, replacement_);
        pos = p + 1;
      }
      b.keep(pos, n.text.size());
      Normalized m = b.finish();
      const bool starts = m.text.compare(0, replacement_.size(), replacement_) == 0;
      const bool prepend = !starts && (prepend_ == Prepend::always ||
                                       (prepend_ == Prepend::first && m.original(0, 0).begin == 0));
      if (prepend) {
        NormalizedBuilder p(m);
        p.replace(0, 0, replacement_);
        p.keep(0, m.text.size());
        m = p.finish();
      }
      if (!split_) {
        if (!m.empty()) out.push_back(std::move(m));
        continue;
      }
      matches.clear();
      for (std::size_t p = m.text.find(replacement_); p != std::string::npos;
           p = m.text.find(replacement_, p + replacement_.size()))
        matches.emplace_back(p, p + replacement_.size());
      cover(m.text.size(), matches, false, parts);
      split_parts(m, parts, Behavior::merged_with_next, out);
    }
    pieces = std::move(out);
  }

 private:
  enum class Prepend { always, first, never };
  std::string replacement_;
  Prepend prepend_ = Prepend::always;
  bool split_ = true;
};

class Sequence final : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void split(std::vector<Normalized>& pieces) const override {
    for (const auto& p : parts_) p->split(pieces);
  }
  bool byte_level() const override {
    for (const auto& p : parts_)
      if (p->byte_level()) return true;
    return false;
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

// Bert: whitespace removed, then every punctuation character isolated.
class Bert final : public PreTokenizer {
 public:
  Bert()
      : spaces_(char_split(is_whitespace, Behavior::removed)),
        punct_(char_split(is_punctuation, Behavior::isolated)) {}
  void split(std::vector<Normalized>& pieces) const override {
    spaces_->split(pieces);
    punct_->split(pieces);
  }

 private:
  std::unique_ptr<PreTokenizer> spaces_, punct_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Node& node) {
  if (node.is_null()) return nullptr;
  const std::string type = node.type();
  if (type == "ByteLevel") return std::make_unique<ByteLevel>(node);
  if (type == "Split") return std::make_unique<Split>(node);
  if (type == "Metaspace") return std::make_unique<Metaspace>(node);
  if (type == "Whitespace") return std::make_unique<Whitespace>();
  if (type == "WhitespaceSplit") return char_split(is_whitespace, Behavior::removed);
  if (type == "Digits")
    return char_split(is_numeric, node.boolean("individual_digits", false) ? Behavior::isolated
                                                                           : Behavior::contiguous);
  if (type == "Punctuation") {
    const Node b = node.get("behavior");
    return char_split(is_punctuation, b.is_null() ? Behavior::isolated : parse_behavior(b));
  }
  if (type == "BertPreTokenizer") return std::make_unique<Bert>();
  if (type == "Sequence") {
    const Node list = node.at("pretokenizers");
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    bool byte_level = false;
    for (std::size_t i = 0; i < list.size(); ++i) {
      auto p = make_pre_tokenizer(list.at(i));
      if (!p) continue;
      // Pieces stay raw bytes (see the header): nothing may look at them after ByteLevel.
      if (byte_level) list.at(i).fail("a pre-tokenizer after ByteLevel is not supported by masque");
      byte_level = p->byte_level();
      parts.push_back(std::move(p));
    }
    return std::make_unique<Sequence>(std::move(parts));
  }
  node.unknown_type("pre-tokenizer",
                    "ByteLevel, Split, Metaspace, Whitespace, WhitespaceSplit, Digits, "
                    "Punctuation, BertPreTokenizer, Sequence");
}

}  // namespace masque::hfjson

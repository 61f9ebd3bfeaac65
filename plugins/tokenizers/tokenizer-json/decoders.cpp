#include "decoders.hpp"

#include "byte_level.hpp"
#include "regex.hpp"
#include "utf8.hpp"

namespace masque::hfjson {

namespace {

using masque::tok::decode_utf8;

constexpr const char* kReplacementChar = "\xEF\xBF\xBD";

std::vector<char32_t> chars_of(const std::string& s) {
  std::vector<char32_t> out;
  for (std::size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    int len = decode_utf8(s, i, cp);
    if (len == 0) {
      cp = 0xFFFD;
      len = 1;
    }
    out.push_back(cp);
    i += static_cast<std::size_t>(len);
  }
  return out;
}

std::string string_of(const std::vector<char32_t>& chars, std::size_t b, std::size_t e) {
  std::string out;
  for (std::size_t i = b; i < e; ++i) masque::tok::append_utf8(out, chars[i]);
  return out;
}

class ByteLevel final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes, raw;
    for (const std::string& t : tokens) {
      if (masque::tok::alphabet_to_bytes(t, raw))
        bytes += raw;
      else
        bytes += t;  // a token outside the alphabet (an added token) stands for itself
    }
    tokens.assign(1, utf8_lossy(bytes));
  }
};

class Metaspace final : public Decoder {
 public:
  explicit Metaspace(const Node& node) {
    const Node r = node.get("replacement");
    replacement_ = r.is_null() ? U'\u2581' : r.one_char();
    const Node scheme = node.get("prepend_scheme");
    if (!scheme.is_null())
      strip_first_ = scheme.str() != "never";
    else
      strip_first_ = node.boolean("add_prefix_space", true);
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      for (char32_t c : chars_of(tokens[i])) {
        if (c != replacement_)
          masque::tok::append_utf8(out, c);
        else if (!(i == 0 && strip_first_))
          out += ' ';
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  char32_t replacement_;
  bool strip_first_ = true;
};

class ByteFallback final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    auto flush = [&] {
      if (bytes.empty()) return;
      if (masque::tok::find_invalid_utf8(bytes) == std::string::npos)
        out.push_back(bytes);
      else
        for (std::size_t k = 0; k < bytes.size(); ++k) out.emplace_back(kReplacementChar);
      bytes.clear();
    };
    for (std::string& t : tokens) {
      const int b = byte_of(t);
      if (b >= 0) {
        bytes.push_back(static_cast<char>(b));
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    tokens = std::move(out);
  }

 private:
  static int byte_of(const std::string& t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
    auto hex = [](char c) {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1000;
    };
    const int v = hex(t[3]) * 16 + hex(t[4]);
    return v >= 0 ? v : -1;
  }
};

class Fuse final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class Strip final : public Decoder {
 public:
  explicit Strip(const Node& node)
      : content_(node.at("content").one_char()),
        start_(static_cast<std::size_t>(std::max<std::int64_t>(0, node.integer("start", 0)))),
        stop_(static_cast<std::size_t>(std::max<std::int64_t>(0, node.integer("stop", 0)))) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      const std::vector<char32_t> c = chars_of(t);
      std::size_t b = 0, e = c.size();
      for (std::size_t i = 0; i < start_ && i < c.size() && c[i] == content_; ++i) b = i + 1;
      for (std::size_t i = 0; i < stop_ && i < c.size(); ++i) {
        const std::size_t index = c.size() - i - 1;
        if (c[index] != content_) break;
        e = index;
      }
      t = b < e ? string_of(c, b, e) : std::string();
    }
  }

 private:
  char32_t content_;
  std::size_t start_, stop_;
};

class Replace final : public Decoder {
 public:
  explicit Replace(const Node& node)
      : pattern_(node.at("pattern")), content_(node.str("content")) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<Span> m;
    for (std::string& t : tokens) {
      m.clear();
      pattern_.find_all(t, m);
      if (m.empty()) continue;
      std::string out;
      std::size_t pos = 0;
      for (const auto& [b, e] : m) {
        out.append(t, pos, b - pos);
        out += content_;
        pos = e;
      }
      out.append(t, pos, std::string::npos);
      t = std::move(out);
    }
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class WordPiece final : public Decoder {
 public:
  explicit WordPiece(const Node& node)
      : prefix_(node.str("prefix", "##")), cleanup_(node.boolean("cleanup", true)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i != 0) {
        if (t.compare(0, prefix_.size(), prefix_) == 0)
          t.erase(0, prefix_.size());
        else
          t = " " + t;
      }
      if (cleanup_) t = cleanup(t);
    }
  }

 private:
  // Hugging Face's cleanup(): spaces before punctuation and in English contractions.
  static std::string cleanup(std::string s) {
    static const std::pair<const char*, const char*> kRules[] = {
        {" .", "."},   {" ?", "?"},     {" !", "!"},    {" ,", ","},
        {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},  {" do not", " don't"},
        {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    for (const auto& [from, to] : kRules) {
      const std::string f = from, t = to;
      for (std::size_t p = s.find(f); p != std::string::npos; p = s.find(f, p + t.size()))
        s.replace(p, f.size(), t);
    }
    return s;
  }
  std::string prefix_;
  bool cleanup_;
};

class Sequence final : public Decoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

}  // namespace

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  auto in = [&](std::size_t k, unsigned char lo, unsigned char hi) {
    return k < n && p[k] >= lo && p[k] <= hi;
  };
  for (std::size_t i = 0; i < n;) {
    const unsigned char b = p[i];
    if (b < 0x80) {
      out.push_back(static_cast<char>(b));
      ++i;
      continue;
    }
    std::size_t width = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      width = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      width = 3;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      width = 4;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    }
    // The longest valid prefix of a sequence is replaced by one U+FFFD.
    std::size_t good = 1;
    if (width > 0 && in(i + 1, lo, hi)) {
      good = 2;
      while (good < width && in(i + good, 0x80, 0xBF)) ++good;
    }
    if (width > 0 && good == width) {
      out.append(s.substr(i, width));
    } else {
      out += kReplacementChar;
    }
    i += good;
  }
  return out;
}

std::unique_ptr<Decoder> make_decoder(const Node& node) {
  if (node.is_null()) return nullptr;
  const std::string type = node.type();
  if (type == "ByteLevel") return std::make_unique<ByteLevel>();
  if (type == "Metaspace") return std::make_unique<Metaspace>(node);
  if (type == "ByteFallback") return std::make_unique<ByteFallback>();
  if (type == "Fuse") return std::make_unique<Fuse>();
  if (type == "Strip") return std::make_unique<Strip>(node);
  if (type == "Replace") return std::make_unique<Replace>(node);
  if (type == "WordPiece") return std::make_unique<WordPiece>(node);
  if (type == "Sequence") {
    const Node list = node.at("decoders");
    std::vector<std::unique_ptr<Decoder>> parts;
    for (std::size_t i = 0; i < list.size(); ++i)
      if (auto p = make_decoder(list.at(i))) parts.push_back(std::move(p));
    return std::make_unique<Sequence>(std::move(parts));
  }
  node.unknown_type(
      "decoder", "ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, WordPiece, Sequence");
}

}  // namespace masque::hfjson

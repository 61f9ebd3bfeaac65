#include "normalizers.hpp"

#include <stdexcept>
#include <vector>

#include <unicode/brkiter.h>
#include <unicode/bytestream.h>
#include <unicode/edits.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/utext.h>

#include "literal_matcher.hpp"
#include "precompiled.hpp"
#include "regex.hpp"
#include "utf8.hpp"

namespace masque::hfjson {

namespace {

using masque::tok::append_utf8;
using masque::tok::decode_utf8;

// Calls f(begin, end, code point) for every character of `s` (valid UTF-8).
template <class F>
void for_each_char(const std::string& s, F&& f) {
  for (std::size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    int len = decode_utf8(s, i, cp);
    if (len == 0) len = 1;  // cannot happen for checked text; never loop forever
    f(i, i + static_cast<std::size_t>(len), cp);
    i += static_cast<std::size_t>(len);
  }
}

class UnicodeForm final : public Normalizer {
 public:
  explicit UnicodeForm(const std::string& form) {
    UErrorCode status = U_ZERO_ERROR;
    if (form == "NFC") norm_ = icu::Normalizer2::getNFCInstance(status);
    if (form == "NFD") norm_ = icu::Normalizer2::getNFDInstance(status);
    if (form == "NFKC") norm_ = icu::Normalizer2::getNFKCInstance(status);
    if (form == "NFKD") norm_ = icu::Normalizer2::getNFKDInstance(status);
    if (U_FAILURE(status) || !norm_) throw std::runtime_error("ICU has no " + form + " normalizer");
  }
  void normalize(Normalized& n) const override {
    UErrorCode status = U_ZERO_ERROR;
    if (norm_->isNormalizedUTF8(
            icu::StringPiece(n.text.data(), static_cast<int32_t>(n.text.size())), status) &&
        U_SUCCESS(status))
      return;
    status = U_ZERO_ERROR;
    std::string out;
    icu::StringByteSink<std::string> sink(&out);
    icu::Edits edits;
    norm_->normalizeUTF8(0, icu::StringPiece(n.text.data(), static_cast<int32_t>(n.text.size())),
                         sink, &edits, status);
    if (U_FAILURE(status)) return;  // leave the text as it is rather than lose it
    NormalizedBuilder b(n);
    icu::Edits::Iterator it = edits.getFineIterator();
    while (it.next(status)) {
      const auto src = static_cast<std::size_t>(it.sourceIndex());
      const auto old_len = static_cast<std::size_t>(it.oldLength());
      if (it.hasChange())
        b.replace(src, src + old_len,
                  std::string_view(out).substr(static_cast<std::size_t>(it.destinationIndex()),
                                               static_cast<std::size_t>(it.newLength())));
      else
        b.keep(src, src + old_len);
    }
    n = b.finish();
  }

 private:
  const icu::Normalizer2* norm_ = nullptr;
};

// Rust's char::to_lowercase: per code point, full mapping, no context.
class Lowercase final : public Normalizer {
 public:
  void normalize(Normalized& n) const override {
    bool changes = false;
    for (unsigned char c : n.text) changes |= (c >= 'A' && c <= 'Z') || c >= 0x80;
    if (!changes) return;
    NormalizedBuilder b(n);
    std::string lower;
    for_each_char(n.text, [&](std::size_t s, std::size_t e, char32_t cp) {
      if (cp < 0x80) {
        if (cp >= 'A' && cp <= 'Z')
          b.replace(s, e, std::string(1, static_cast<char>(cp + 32)));
        else
          b.keep(s, e);
        return;
      }
      icu::UnicodeString u(static_cast<UChar32>(cp));
      u.toLower(icu::Locale::getRoot());
      lower.clear();
      u.toUTF8String(lower);
      if (lower == n.text.substr(s, e - s))
        b.keep(s, e);
      else
        b.replace(s, e, lower);
    });
    n = b.finish();
  }
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(Normalized& n) const override {
    std::size_t b = 0, e = n.text.size();
    std::vector<std::pair<std::size_t, std::size_t>> chars;
    for_each_char(n.text,
                  [&](std::size_t s, std::size_t t, char32_t) { chars.emplace_back(s, t); });
    auto space = [&](std::size_t k) {
      char32_t cp = 0;
      decode_utf8(n.text, chars[k].first, cp);
      return u_hasBinaryProperty(static_cast<UChar32>(cp), UCHAR_WHITE_SPACE) != 0;
    };
    std::size_t first = 0, last = chars.size();
    if (left_)
      while (first < last && space(first)) ++first;
    if (right_)
      while (last > first && space(last - 1)) --last;
    b = first < chars.size() ? chars[first].first : n.text.size();
    e = last > 0 && last > first ? chars[last - 1].second : b;
    if (b == 0 && e == n.text.size()) return;
    n = n.slice(b, e);
  }

 private:
  bool left_, right_;
};

// Removes combining marks (general category M).
class StripAccents final : public Normalizer {
 public:
  void normalize(Normalized& n) const override {
    NormalizedBuilder b(n);
    bool changed = false;
    for_each_char(n.text, [&](std::size_t s, std::size_t e, char32_t cp) {
      if (U_GET_GC_MASK(static_cast<UChar32>(cp)) & U_GC_M_MASK) {
        b.replace(s, e, "");
        changed = true;
      } else {
        b.keep(s, e);
      }
    });
    if (changed) n = b.finish();
  }
};

class Replace final : public Normalizer {
 public:
  explicit Replace(const Node& node)
      : pattern_(node.at("pattern")), content_(node.str("content")) {}
  void normalize(Normalized& n) const override {
    std::vector<Span> matches;
    pattern_.find_all(n.text, matches);
    if (matches.empty()) return;
    NormalizedBuilder b(n);
    std::size_t pos = 0;
    for (const auto& [s, e] : matches) {
      b.keep(pos, s);
      b.replace(s, e, content_);
      pos = e;
    }
    b.keep(pos, n.text.size());
    n = b.finish();
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string text) : text_(std::move(text)) {}
  void normalize(Normalized& n) const override {
    if (n.text.empty()) return;
    NormalizedBuilder b(n);
    b.replace(0, 0, text_);
    b.keep(0, n.text.size());
    n = b.finish();
  }

 private:
  std::string text_;
};

// SentencePiece's precompiled charsmap, applied as Hugging Face does: a grapheme shorter than 6
// bytes is replaced as a whole when the trie knows a prefix of it; otherwise each character.
class PrecompiledNormalizer final : public Normalizer {
 public:
  explicit PrecompiledNormalizer(Precompiled map) : map_(std::move(map)) {}
  void normalize(Normalized& n) const override {
    if (n.text.empty()) return;
    UErrorCode status = U_ZERO_ERROR;
    UText* ut =
        utext_openUTF8(nullptr, n.text.data(), static_cast<int64_t>(n.text.size()), &status);
    std::unique_ptr<icu::BreakIterator> it(
        icu::BreakIterator::createCharacterInstance(icu::Locale::getRoot(), status));
    if (U_FAILURE(status)) {
      utext_close(ut);
      throw std::runtime_error(std::string("ICU grapheme iterator: ") + u_errorName(status));
    }
    it->setText(ut, status);
    NormalizedBuilder b(n);
    bool changed = false;
    std::size_t start = static_cast<std::size_t>(it->first());
    for (int32_t end = it->next(); end != icu::BreakIterator::DONE; end = it->next()) {
      const auto stop = static_cast<std::size_t>(end);
      const std::string_view g = std::string_view(n.text).substr(start, stop - start);
      std::string_view norm;
      if (g.size() < 6 && map_.transform(g, norm)) {
        b.replace(start, stop, norm);
        changed = true;
      } else {
        for (std::size_t i = start; i < stop;) {
          char32_t cp = 0;
          int len = decode_utf8(n.text, i, cp);
          if (len == 0) len = 1;
          const std::size_t j = i + static_cast<std::size_t>(len);
          if (map_.transform(std::string_view(n.text).substr(i, j - i), norm)) {
            b.replace(i, j, norm);
            changed = true;
          } else {
            b.keep(i, j);
          }
          i = j;
        }
      }
      start = stop;
    }
    utext_close(ut);
    if (changed) n = b.finish();
  }

 private:
  Precompiled map_;
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(Normalized& n) const override {
    for (const auto& p : parts_) p->normalize(n);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const Node& node) {
  if (node.is_null()) return nullptr;
  const std::string type = node.type();
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD")
    return std::make_unique<UnicodeForm>(type);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Strip")
    return std::make_unique<Strip>(node.boolean("strip_left", true),
                                   node.boolean("strip_right", true));
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "Replace") return std::make_unique<Replace>(node);
  if (type == "Prepend") return std::make_unique<Prepend>(node.str("prepend"));
  if (type == "Precompiled") {
    const Node blob = node.at("precompiled_charsmap");
    if (blob.is_null()) return nullptr;  // an empty charsmap normalizes nothing
    try {
      return std::make_unique<PrecompiledNormalizer>(Precompiled::from_base64(blob.str()));
    } catch (const std::invalid_argument& e) {
      blob.fail(e.what());
    }
  }
  if (type == "Sequence") {
    const Node list = node.at("normalizers");
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (std::size_t i = 0; i < list.size(); ++i)
      if (auto p = make_normalizer(list.at(i))) parts.push_back(std::move(p));
    return std::make_unique<Sequence>(std::move(parts));
  }
  node.unknown_type("normalizer",
                    "NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, Replace, Prepend, "
                    "Precompiled, Sequence");
}

}  // namespace masque::hfjson

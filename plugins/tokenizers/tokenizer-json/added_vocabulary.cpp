#include "added_vocabulary.hpp"

#include <unicode/uchar.h>

#include "normalizers.hpp"
#include "utf8.hpp"

namespace masque::hfjson {

namespace {

using masque::tok::decode_utf8;

bool is_whitespace(char32_t c) {
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE) != 0;
}

// Rust regex's \w: alphabetic, marks, decimal digits, connector punctuation, join controls.
bool is_word_char(char32_t c) {
  const auto cp = static_cast<UChar32>(c);
  return u_hasBinaryProperty(cp, UCHAR_ALPHABETIC) ||
         (U_GET_GC_MASK(cp) & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) ||
         u_hasBinaryProperty(cp, UCHAR_JOIN_CONTROL);
}

// The last character before byte `end` (end > 0).
char32_t char_before(std::string_view s, std::size_t end, std::size_t& start) {
  start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  char32_t cp = 0;
  if (decode_utf8(s, start, cp) == 0) cp = 0xFFFD;
  return cp;
}

}  // namespace

AddedVocabulary::AddedVocabulary(const Node& list, const Normalizer* normalizer)
    : normalizer_(normalizer) {
  if (list.is_null()) return;
  const std::size_t n = list.size();
  for (std::size_t i = 0; i < n; ++i) {
    const Node t = list.at(i);
    AddedToken a;
    const std::int64_t id = t.at("id").integer();
    if (id < 0 || id > INT32_MAX / 2) t.at("id").fail("the id is not in 0..2^30");
    a.id = static_cast<TokenId>(id);
    a.content = t.str("content");
    if (a.content.empty()) t.at("content").fail("an added token cannot be empty");
    a.special = t.boolean("special", false);
    a.single_word = t.boolean("single_word", false);
    a.lstrip = t.boolean("lstrip", false);
    a.rstrip = t.boolean("rstrip", false);
    a.normalized = t.boolean("normalized", !a.special);
    if (static_cast<std::size_t>(a.id) >= index_of_id_.size())
      index_of_id_.resize(static_cast<std::size_t>(a.id) + 1, -1);
    index_of_id_[a.id] = static_cast<std::int32_t>(tokens_.size());
    tokens_.push_back(std::move(a));
  }
  for (std::size_t k = 0; k < tokens_.size(); ++k) {
    const AddedToken& a = tokens_[k];
    if (!a.normalized) {
      raw_.add(a.content, static_cast<std::int64_t>(k));
      continue;
    }
    Normalized content = Normalized::of(a.content, 0);
    if (normalizer_) normalizer_->normalize(content);
    normalized_.add(content.text, static_cast<std::int64_t>(k));
  }
}

const AddedToken* AddedVocabulary::by_id(TokenId id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= index_of_id_.size() || index_of_id_[id] < 0)
    return nullptr;
  return &tokens_[static_cast<std::size_t>(index_of_id_[id])];
}

TokenId AddedVocabulary::find(std::string_view content) const {
  for (const AddedToken& a : tokens_)
    if (a.content == content) return a.id;
  return -1;
}

void AddedVocabulary::split(const Normalized& n, const masque::tok::LiteralMatcher& matcher,
                            std::vector<Segment>& out) const {
  const std::string_view s = n.text;
  std::size_t done = 0;  // end of what has been emitted
  std::size_t pos = 0;
  masque::tok::LiteralMatcher::Match m;
  while (matcher.next(s, pos, m)) {
    pos = m.end;
    const AddedToken& a = tokens_[static_cast<std::size_t>(m.value)];
    std::size_t start = m.begin, stop = m.end;
    if (a.single_word) {
      std::size_t before = 0;
      const bool word_before = start > 0 && is_word_char(char_before(s, start, before));
      char32_t next = 0;
      const bool word_after =
          stop < s.size() && decode_utf8(s, stop, next) > 0 && is_word_char(next);
      if (word_before || word_after) continue;
    }
    if (a.lstrip) {
      std::size_t b = start;
      while (b > 0) {
        std::size_t prev = 0;
        if (!is_whitespace(char_before(s, b, prev))) break;
        b = prev;
      }
      start = std::max(b, done);
    }
    if (a.rstrip) {
      while (stop < s.size()) {
        char32_t cp = 0;
        const int len = decode_utf8(s, stop, cp);
        if (len == 0 || !is_whitespace(cp)) break;
        stop += static_cast<std::size_t>(len);
      }
      pos = stop;
    }
    if (done < start) out.push_back({n.slice(done, start), -1});
    out.push_back({n.slice(start, stop), a.id});
    done = stop;
  }
  if (done < s.size() || (done == 0 && s.empty())) out.push_back({n.slice(done, s.size()), -1});
}

void AddedVocabulary::extract(std::string_view text, std::vector<Segment>& out) const {
  std::vector<Segment> first;
  split(Normalized::of(text, 0), raw_, first);
  for (Segment& seg : first) {
    if (seg.added >= 0) {
      out.push_back(std::move(seg));
      continue;
    }
    if (normalizer_) normalizer_->normalize(seg.text);
    if (normalized_.empty()) {
      out.push_back(std::move(seg));
      continue;
    }
    split(seg.text, normalized_, out);
  }
}

}  // namespace masque::hfjson

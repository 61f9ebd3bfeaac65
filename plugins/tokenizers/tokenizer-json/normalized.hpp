// A piece of text on its way through normalizers and pre-tokenizers, remembering for every byte
// the span of the original text it came from (Hugging Face's NormalizedString, byte-aligned).
//
// Alignment is lazy: until a transformation changes the text, byte i of `text` is original byte
// `base + i` and `align` stays empty (the common case for byte-level BPE, which then costs no
// per-byte bookkeeping).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "masque/tokenizer.hpp"

namespace masque::hfjson {

struct Normalized {
  std::string text;
  std::vector<ByteSpan> align;  // per byte of `text`; empty: identity from `base`
  std::uint32_t base = 0;
  // Where an empty text sits in the original (for its empty spans).
  std::uint32_t anchor = 0;

  static Normalized of(std::string_view original, std::uint32_t base) {
    Normalized n;
    n.text.assign(original);
    n.base = n.anchor = base;
    return n;
  }
  bool identity() const { return align.empty(); }
  bool empty() const { return text.empty(); }

  // The original span of text[b, e) (b <= e <= size); an empty range maps to an empty span.
  ByteSpan original(std::size_t b, std::size_t e) const {
    if (identity()) {
      return {base + static_cast<std::uint32_t>(b), base + static_cast<std::uint32_t>(e)};
    }
    if (b >= e) {
      const std::uint32_t at =
          b < align.size() ? align[b].begin : (align.empty() ? anchor : align.back().end);
      return {at, at};
    }
    return {align[b].begin, align[e - 1].end};
  }
  // Gives every byte its own entry.
  void materialize() {
    if (!identity() || text.empty()) return;
    align.resize(text.size());
    for (std::size_t i = 0; i < text.size(); ++i)
      align[i] = {base + static_cast<std::uint32_t>(i), base + static_cast<std::uint32_t>(i + 1)};
  }
  // text[b, e) with its alignment.
  Normalized slice(std::size_t b, std::size_t e) const {
    Normalized n;
    n.text.assign(text, b, e - b);
    if (identity()) {
      n.base = n.anchor = base + static_cast<std::uint32_t>(b);
    } else {
      n.align.assign(align.begin() + static_cast<std::ptrdiff_t>(b),
                     align.begin() + static_cast<std::ptrdiff_t>(e));
      n.anchor = original(b, b).begin;
    }
    return n;
  }
};

// Builds a transformed Normalized piece by piece: unchanged stretches keep their alignment,
// replaced ones map every new byte to the span of what they replace.
class NormalizedBuilder {
 public:
  explicit NormalizedBuilder(const Normalized& from) : from_(from) {
    out_.text.reserve(from.text.size() + 8);
    out_.align.reserve(from.text.size() + 8);
    out_.anchor = from.original(0, 0).begin;
  }
  // Copies from.text[b, e) unchanged.
  void keep(std::size_t b, std::size_t e) {
    out_.text.append(from_.text, b, e - b);
    for (std::size_t i = b; i < e; ++i) out_.align.push_back(from_.original(i, i + 1));
  }
  // Writes `with` in place of from.text[b, e) (b == e: an insertion before byte b).
  void replace(std::size_t b, std::size_t e, std::string_view with) {
    const ByteSpan span = from_.original(b, e);
    out_.text.append(with);
    out_.align.insert(out_.align.end(), with.size(), span);
  }
  Normalized finish() {
    if (out_.text.empty()) {
      out_.align.clear();
      out_.base = out_.anchor;
    }
    return std::move(out_);
  }

 private:
  const Normalized& from_;
  Normalized out_;
};

}  // namespace masque::hfjson

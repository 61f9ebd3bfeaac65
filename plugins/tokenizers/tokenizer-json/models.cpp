#include "models.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "bpe_merges.hpp"
#include "byte_level.hpp"
#include "masque/error.hpp"
#include "piece_cache.hpp"
#include "utf8.hpp"
#include "vocabulary.hpp"

namespace masque::hfjson {

namespace {

using masque::tok::decode_utf8;
using masque::tok::quote_token;

// Byte length of the character starting at s[i] (1 for bytes that start none).
std::size_t char_len(std::string_view s, std::size_t i) {
  char32_t cp = 0;
  const int len = decode_utf8(s, i, cp);
  return len == 0 ? 1 : static_cast<std::size_t>(len);
}

std::string byte_piece(unsigned char b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "<0x%02X>", b);
  return buf;
}

// The 256 "<0xAB>" byte pieces (-1 where the vocabulary lacks one).
std::vector<TokenId> byte_pieces(const Vocabulary& v) {
  std::vector<TokenId> ids(256);
  for (int b = 0; b < 256; ++b) ids[b] = v.find(byte_piece(static_cast<unsigned char>(b)));
  return ids;
}

// ---------------------------------------------------------------------------------------------
class Bpe final : public Model {
 public:
  Bpe(const Node& node, const ModelTables& tables, bool byte_level) : byte_level_(byte_level) {
    vocab_ = Vocabulary::from_entries(tables.vocab, node.at("vocab"));
    const Node unk = node.get("unk_token");
    if (!unk.is_null()) {
      unk_ = vocab_.find(unk.str());
      if (unk_ < 0)
        unk.fail("the unk_token " + quote_token(unk.str()) + " is not in the vocabulary");
    }
    prefix_ = node.str("continuing_subword_prefix", "");
    suffix_ = node.str("end_of_word_suffix", "");
    fuse_unk_ = node.boolean("fuse_unk", false);
    byte_fallback_ = node.boolean("byte_fallback", false);
    ignore_merges_ = node.boolean("ignore_merges", false);
    load_merges(node.at("merges"), tables.merges);
    byte_ids_ = byte_pieces(vocab_);
    if (byte_level_) prepare_byte_level(node);
  }

  void tokenize(std::string_view piece, std::vector<PieceToken>& out) const override {
    if (byte_level_ && prefix_.empty() && suffix_.empty()) {
      tokenize_bytes(piece, out);
      return;
    }
    if (ignore_merges_)
      if (const TokenId id = vocab_.find(piece); id >= 0) {
        out.push_back({id, 0, static_cast<std::uint32_t>(piece.size())});
        return;
      }
    std::vector<TokenId> ids;
    std::vector<std::uint32_t> lens;
    initial_symbols(piece, ids, lens);
    masque::tok::merge_symbols(merges_, ids, &lens);
    std::uint32_t at = 0;
    for (std::size_t k = 0; k < ids.size(); ++k) {
      out.push_back({ids[k], at, at + lens[k]});
      at += lens[k];
    }
  }
  std::int32_t size() const override { return vocab_.size(); }
  const std::string& piece(TokenId id) const override { return vocab_.piece(id); }
  TokenId find(std::string_view p) const override { return vocab_.find(p); }
  TokenId unk() const override { return unk_; }
  bool reads_raw_bytes() const override { return true; }
  std::size_t memory_bytes() const override {
    return vocab_.memory_bytes() + merges_.memory_bytes() + raw_.size() * 32 +
           byte_len_.capacity() * 2 +
           (byte_level_ ? sizeof(masque::tok::PieceCache) + (2u << 20) : 0);
  }

 private:
  void load_merges(const Node& where,
                   const std::vector<std::pair<std::string, std::string>>& merges) {
    merges_.reserve(merges.size());
    const std::size_t prefix_len = prefix_.size();
    std::string joined;
    for (std::size_t i = 0; i < merges.size(); ++i) {
      const auto& [a, b] = merges[i];
      const auto fail = [&](const std::string& message) {
        where.fail_at("[" + std::to_string(i) + "]", message);
      };
      const TokenId ia = vocab_.find(a), ib = vocab_.find(b);
      if (ia < 0) fail("the token " + quote_token(a) + " is not in the vocabulary");
      if (ib < 0) fail("the token " + quote_token(b) + " is not in the vocabulary");
      if (b.size() < prefix_len) fail("the token " + quote_token(b) + " lacks the subword prefix");
      joined.assign(a);
      joined.append(b, prefix_len);
      const TokenId im = vocab_.find(joined);
      if (im < 0) fail("the merged token " + quote_token(joined) + " is not in the vocabulary");
      // A pair listed twice keeps the later rank (Hugging Face builds a map from the list).
      merges_.insert_or_assign(ia, ib, static_cast<std::uint32_t>(i), im);
    }
  }

  // Raw-byte tables for the byte-level path.
  void prepare_byte_level(const Node& node) {
    const auto b2u = masque::tok::bytes_to_unicode();
    for (int b = 0; b < 256; ++b) {
      std::string one;
      masque::tok::append_utf8(one, b2u[b]);
      byte_token_[b] = vocab_.find(one);
    }
    byte_len_.assign(static_cast<std::size_t>(vocab_.size()), 0);
    std::string raw;
    for (TokenId id = 0; id < vocab_.size(); ++id) {
      const std::string& p = vocab_.piece(id);
      if (p.empty() || !masque::tok::alphabet_to_bytes(p, raw)) continue;
      if (raw.size() > 0xFFFF)
        node.at("vocab").fail("the token " + quote_token(p) + " is too long");
      byte_len_[id] = static_cast<std::uint16_t>(raw.size());
      raw_.insert(raw, id);
    }
  }

  void tokenize_bytes(std::string_view piece, std::vector<PieceToken>& out) const {
    const std::uint64_t h = masque::tok::hash_bytes(piece);
    if (ignore_merges_)
      if (const TokenId id = raw_.find(piece, h); id >= 0) {
        out.push_back({id, 0, static_cast<std::uint32_t>(piece.size())});
        return;
      }
    thread_local std::vector<TokenId> ids;
    const bool cacheable = piece.size() <= masque::tok::PieceCache::kMaxPieceBytes;
    if (!(cacheable && cache_.find(piece, h, ids))) {
      ids.resize(piece.size());
      bool complete = true;
      for (std::size_t i = 0; i < piece.size(); ++i) {
        ids[i] = byte_token_[static_cast<unsigned char>(piece[i])];
        complete &= ids[i] >= 0;
      }
      if (!complete) {  // a vocabulary without every byte: the general path knows unk/fallback
        tokenize_general_bytes(piece, out);
        return;
      }
      masque::tok::merge_symbols(merges_, ids);
      if (cacheable) cache_.insert(piece, h, ids);
    }
    std::uint32_t at = 0;
    for (TokenId id : ids) {
      out.push_back({id, at, at + byte_len_[id]});
      at += byte_len_[id];
    }
  }

  void tokenize_general_bytes(std::string_view piece, std::vector<PieceToken>& out) const {
    // Spell the bytes in the alphabet, as Hugging Face's model sees them.
    const std::string spelled = masque::tok::bytes_to_alphabet(piece);
    std::vector<TokenId> ids;
    std::vector<std::uint32_t> lens;
    initial_symbols(spelled, ids, lens);
    masque::tok::merge_symbols(merges_, ids, &lens);
    // lens count alphabet bytes; every raw byte is one alphabet character.
    std::uint32_t at = 0;
    std::size_t pos = 0;
    for (std::size_t k = 0; k < ids.size(); ++k) {
      std::uint32_t n = 0;
      for (std::size_t end = pos + lens[k]; pos < end; pos += char_len(spelled, pos)) ++n;
      out.push_back({ids[k], at, at + n});
      at += n;
    }
  }

  // Hugging Face's BPE::merge_word before merging: one symbol per character (with the subword
  // prefix / word suffix), byte pieces for unknown characters with byte_fallback, else unk
  // (runs fused with fuse_unk).
  void initial_symbols(std::string_view w, std::vector<TokenId>& ids,
                       std::vector<std::uint32_t>& lens) const {
    ids.clear();
    lens.clear();
    TokenId pending_unk = -1;
    std::uint32_t pending_len = 0;
    std::string s;
    for (std::size_t i = 0; i < w.size();) {
      const std::size_t len = char_len(w, i);
      const bool first = i == 0, last = i + len >= w.size();
      s.assign(first || prefix_.empty() ? "" : prefix_);
      s.append(w.substr(i, len));
      if (last) s.append(suffix_);
      i += len;
      if (const TokenId id = vocab_.find(s); id >= 0) {
        if (pending_unk >= 0) {
          ids.push_back(pending_unk);
          lens.push_back(pending_len);
          pending_unk = -1;
        }
        ids.push_back(id);
        lens.push_back(static_cast<std::uint32_t>(len));
        continue;
      }
      if (byte_fallback_) {
        bool all = true;
        for (unsigned char c : s) all &= byte_ids_[c] >= 0;
        if (all) {
          for (unsigned char c : s) {
            ids.push_back(byte_ids_[c]);
            lens.push_back(1);
          }
          continue;
        }
      }
      if (unk_ >= 0) {
        if (pending_unk >= 0 && fuse_unk_) {
          pending_len += static_cast<std::uint32_t>(len);
        } else {
          if (pending_unk >= 0) {
            ids.push_back(pending_unk);
            lens.push_back(pending_len);
          }
          pending_unk = unk_;
          pending_len = static_cast<std::uint32_t>(len);
        }
      }
    }
    if (pending_unk >= 0) {
      ids.push_back(pending_unk);
      lens.push_back(pending_len);
    }
  }

  Vocabulary vocab_;
  masque::tok::MergeTable merges_;
  TokenId unk_ = -1;
  std::string prefix_, suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false, byte_level_ = false;
  std::vector<TokenId> byte_ids_;  // "<0xAB>" pieces
  // Byte-level path: the vocabulary in raw bytes.
  TokenId byte_token_[256] = {};
  std::vector<std::uint16_t> byte_len_;
  masque::tok::TokenMap raw_;
  mutable masque::tok::PieceCache cache_;
};

// ---------------------------------------------------------------------------------------------
// A score as the Rust library holds it. tokenizers reads tokenizer.json with serde_json, whose
// float parsing (without its float_roundtrip feature) makes an integer of the digits, rounds it
// to f64 and divides (or multiplies) by an exact power of ten: two roundings, so a 17-digit
// score can land one ulp from the correctly rounded value nlohmann reads. Equal-score
// segmentations (T5: "---","---","-" or "-","---","---") are then told apart by those last
// bits. The file's text is the shortest round-trip form of its doubles (serde_json's and
// Python's writers), which std::to_chars gives back from the value.
double serde_json_value(double correct) {
  char text[64];
  const auto [end, ec] = std::to_chars(text, text + sizeof text, correct);
  if (ec != std::errc()) return correct;
  std::uint64_t digits = 0;
  int count = 0, exponent = 0;
  bool fraction = false;
  for (const char* c = text; c < end; ++c) {
    if (*c == '-') continue;
    if (*c == '.') {
      fraction = true;
    } else if (*c >= '0' && *c <= '9') {
      if (++count > 19) return correct;  // serde_json's long-integer path: not emulated
      digits = digits * 10 + static_cast<std::uint64_t>(*c - '0');
      if (fraction) --exponent;
    } else if (*c == 'e' || *c == 'E') {
      exponent += std::atoi(c + 1);
      break;
    } else {
      return correct;  // inf, nan
    }
  }
  if (exponent < -308 || exponent > 308) return correct;  // beyond serde_json's table
  // serde_json's POW10 table: the correctly rounded 1e0 ... 1e308, as strtod reads them.
  const double pow10 = std::strtod(("1e" + std::to_string(std::abs(exponent))).c_str(), nullptr);
  double f = static_cast<double>(digits);
  f = exponent < 0 ? f / pow10 : f * pow10;
  return std::signbit(correct) ? -f : f;
}

class Unigram final : public Model {
 public:
  Unigram(const Node& node, const ModelTables& tables) {
    const Node vocab = node.at("vocab");
    const std::size_t n = tables.scored.size();
    scores_.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      const auto& [p, score] = tables.scored[i];
      if (p.size() > masque::tok::kMaxTokenBytes)
        vocab.fail_at("[" + std::to_string(i) + "]", "the piece is too long");
      vocab_.add(p, static_cast<TokenId>(i));  // a duplicate keeps its first id
      scores_.push_back(serde_json_value(score));
      min_score_ = std::min(min_score_, scores_.back());
      max_len_ = std::max(max_len_, p.size());
    }
    if (n == 0) vocab.fail("the vocabulary is empty");
    const Node unk = node.get("unk_id");
    if (!unk.is_null()) {
      const std::int64_t u = unk.integer();
      if (u < 0 || u >= static_cast<std::int64_t>(n)) unk.fail("unk_id is outside the vocabulary");
      unk_ = static_cast<TokenId>(u);
    }
    byte_fallback_ = node.boolean("byte_fallback", false);
    byte_ids_ = byte_pieces(vocab_);
  }

  void tokenize(std::string_view s, std::vector<PieceToken>& out) const override {
    const double unk_score = min_score_ - 10.0;
    struct Best {
      double score = 0;
      std::int64_t starts_at = -1;
      TokenId id = 0;
    };
    std::vector<Best> best(s.size() + 1);
    for (std::size_t start = 0; start < s.size();) {
      const double till_here = best[start].score;
      const std::size_t mblen = char_len(s, start);
      bool single = false;
      const std::size_t limit = std::min(s.size() - start, max_len_);
      for (std::size_t len = 1; len <= limit; ++len) {
        const TokenId id = vocab_.find(s.substr(start, len));
        if (id < 0) continue;
        Best& target = best[start + len];
        const double candidate = scores_[id] + till_here;
        if (len == mblen) single = true;
        if (target.starts_at < 0 || candidate > target.score)
          target = {candidate, static_cast<std::int64_t>(start), id};
      }
      if (!single) {
        if (unk_ < 0)
          throw masque::RecordError(
              "tokenizer-json: a character is not in the "
              "Unigram vocabulary and the model has no unk_id");
        Best& target = best[start + mblen];
        const double candidate = unk_score + till_here;
        if (target.starts_at < 0 || candidate > target.score)
          target = {candidate, static_cast<std::int64_t>(start), unk_};
      }
      start += mblen;
    }
    // Back from the end; runs of unknown pieces become one (fuse_unk).
    struct Piece {
      std::size_t begin, end;
      TokenId id;  // -1: fused unknown text
    };
    std::vector<Piece> pieces;
    std::size_t end = s.size(), unk_end = 0;
    bool in_unk = false;
    while (end > 0) {
      const Best& node = best[end];
      const auto start = static_cast<std::size_t>(node.starts_at);
      if (node.id == unk_) {
        if (!in_unk) unk_end = end;
        in_unk = true;
      } else {
        if (in_unk) pieces.push_back({end, unk_end, -1});
        in_unk = false;
        pieces.push_back({start, end, node.id});
      }
      end = start;
    }
    if (in_unk) pieces.push_back({0, unk_end, -1});
    for (std::size_t k = pieces.size(); k-- > 0;) {
      const Piece& p = pieces[k];
      const auto b = static_cast<std::uint32_t>(p.begin), e = static_cast<std::uint32_t>(p.end);
      if (p.id >= 0) {
        out.push_back({p.id, b, e});
        continue;
      }
      // The fused text is looked up as a whole, as Hugging Face does.
      const std::string_view text = s.substr(p.begin, p.end - p.begin);
      if (const TokenId id = vocab_.find(text); id >= 0) {
        out.push_back({id, b, e});
      } else if (byte_fallback_ && all_bytes(text)) {
        for (std::size_t i = 0; i < text.size(); ++i)
          out.push_back({byte_ids_[static_cast<unsigned char>(text[i])],
                         b + static_cast<std::uint32_t>(i), b + static_cast<std::uint32_t>(i + 1)});
      } else {
        out.push_back({unk_, b, e});
      }
    }
  }
  std::int32_t size() const override { return vocab_.size(); }
  const std::string& piece(TokenId id) const override { return vocab_.piece(id); }
  TokenId find(std::string_view p) const override { return vocab_.find(p); }
  TokenId unk() const override { return unk_; }
  std::size_t memory_bytes() const override {
    return vocab_.memory_bytes() + scores_.capacity() * sizeof(double);
  }

 private:
  bool all_bytes(std::string_view text) const {
    for (unsigned char c : text)
      if (byte_ids_[c] < 0) return false;
    return true;
  }
  Vocabulary vocab_;
  std::vector<double> scores_;
  double min_score_ = std::numeric_limits<double>::infinity();
  std::size_t max_len_ = 0;
  TokenId unk_ = -1;
  bool byte_fallback_ = false;
  std::vector<TokenId> byte_ids_;
};

// ---------------------------------------------------------------------------------------------
class WordPiece final : public Model {
 public:
  WordPiece(const Node& node, const ModelTables& tables) {
    vocab_ = Vocabulary::from_entries(tables.vocab, node.at("vocab"));
    const Node unk = node.at("unk_token");
    unk_ = vocab_.find(unk.str());
    if (unk_ < 0) unk.fail("the unk_token " + quote_token(unk.str()) + " is not in the vocabulary");
    prefix_ = node.str("continuing_subword_prefix", "##");
    max_chars_ = node.integer("max_input_chars_per_word", 100);
  }
  void tokenize(std::string_view w, std::vector<PieceToken>& out) const override {
    const auto whole = static_cast<std::uint32_t>(w.size());
    std::int64_t chars = 0;
    for (std::size_t i = 0; i < w.size(); i += char_len(w, i)) ++chars;
    if (chars > max_chars_) {
      out.push_back({unk_, 0, whole});
      return;
    }
    const std::size_t mark = out.size();
    std::string candidate;
    for (std::size_t start = 0; start < w.size();) {
      std::size_t end = w.size();
      TokenId found = -1;
      while (start < end) {
        candidate.assign(start > 0 ? prefix_ : "");
        candidate.append(w.substr(start, end - start));
        found = vocab_.find(candidate);
        if (found >= 0) break;
        // Back off by the last character.
        std::size_t last = end - 1;
        while (last > start && (static_cast<unsigned char>(w[last]) & 0xC0) == 0x80) --last;
        end = last;
      }
      if (found < 0) {
        out.resize(mark);
        out.push_back({unk_, 0, whole});
        return;
      }
      out.push_back({found, static_cast<std::uint32_t>(start), static_cast<std::uint32_t>(end)});
      start = end;
    }
  }
  std::int32_t size() const override { return vocab_.size(); }
  const std::string& piece(TokenId id) const override { return vocab_.piece(id); }
  TokenId find(std::string_view p) const override { return vocab_.find(p); }
  TokenId unk() const override { return unk_; }
  std::size_t memory_bytes() const override { return vocab_.memory_bytes(); }

 private:
  Vocabulary vocab_;
  TokenId unk_ = -1;
  std::string prefix_;
  std::int64_t max_chars_ = 100;
};

class WordLevel final : public Model {
 public:
  WordLevel(const Node& node, const ModelTables& tables) {
    vocab_ = Vocabulary::from_entries(tables.vocab, node.at("vocab"));
    const Node unk = node.get("unk_token");
    if (!unk.is_null()) unk_ = vocab_.find(unk.str());
  }
  void tokenize(std::string_view w, std::vector<PieceToken>& out) const override {
    TokenId id = vocab_.find(w);
    if (id < 0) id = unk_;
    if (id < 0)
      throw masque::RecordError("tokenizer-json: " + quote_token(w) +
                                " is not in the WordLevel vocabulary, which has no unk_token");
    out.push_back({id, 0, static_cast<std::uint32_t>(w.size())});
  }
  std::int32_t size() const override { return vocab_.size(); }
  const std::string& piece(TokenId id) const override { return vocab_.piece(id); }
  TokenId find(std::string_view p) const override { return vocab_.find(p); }
  TokenId unk() const override { return unk_; }
  std::size_t memory_bytes() const override { return vocab_.memory_bytes(); }

 private:
  Vocabulary vocab_;
  TokenId unk_ = -1;
};

}  // namespace

std::unique_ptr<Model> make_model(const Node& node, const ModelTables& tables, bool byte_level) {
  std::string type;
  if (node.has("type")) {
    type = node.type();
  } else if (node.has("merges")) {  // older files: the fields say which model it is
    type = "BPE";
  } else if (node.get("vocab").value().is_array()) {
    type = "Unigram";
  } else if (node.has("max_input_chars_per_word") || node.has("continuing_subword_prefix")) {
    type = "WordPiece";
  } else if (node.has("vocab")) {
    type = "WordLevel";
  } else {
    node.fail("cannot tell the model type (no \"type\" and no \"vocab\")");
  }
  // The tables were read for $.model.vocab / $.model.merges; a list vocabulary is Unigram's.
  const bool list = tables.vocab_is_list;
  if (type == "BPE" || type == "WordPiece" || type == "WordLevel") {
    const Node vocab = node.at("vocab");
    if (!tables.has_vocab || list) vocab.fail("expected an object {\"token\": id, ...}");
  }
  if (type == "Unigram") {
    const Node vocab = node.at("vocab");
    if (!tables.has_vocab || !list) vocab.fail("expected a list [[\"piece\", score], ...]");
  }
  if (type == "BPE") {
    const Node merges = node.at("merges");
    if (!tables.has_merges) merges.fail("expected a list of merges");
    return std::make_unique<Bpe>(node, tables, byte_level);
  }
  if (type == "Unigram") return std::make_unique<Unigram>(node, tables);
  if (type == "WordPiece") return std::make_unique<WordPiece>(node, tables);
  if (type == "WordLevel") return std::make_unique<WordLevel>(node, tables);
  node.unknown_type("model", "BPE, Unigram, WordPiece, WordLevel");
}

}  // namespace masque::hfjson

// Tokenizer `wordpiece`: BERT's tokenizer, exactly as Hugging Face tokenizers' BertNormalizer +
// BertPreTokenizer + WordPiece (the "fast" BertTokenizer).
//
// Normalization, applied code point by code point to the input (all Unicode data from ICU):
//   1. clean text: drop U+0000, U+FFFD and every Cc (except tab, LF, CR), Cf and Co character;
//      every White_Space character (tab, LF, CR, NBSP, U+3000, U+2028, ...) becomes a space;
//   2. CJK ideographs (Hugging Face's ranges, astral extensions included) get spaces around them;
//   3. strip accents (optional): NFD, then drop nonspacing marks (Mn);
//   4. lowercase (optional): per code point, full mapping, no context (a final capital sigma
//      becomes σ, not ς; İ becomes i + U+0307), as Rust's char::to_lowercase.
// Pre-tokenization splits on whitespace and isolates every punctuation character (ASCII
// punctuation, which includes $+<=>^`|~, and Unicode P*). WordPiece then takes the longest
// vocabulary entry at each point ("##" marks a continuation); a word with more than
// `max_chars_per_word` code points, or one that cannot be covered, becomes one [UNK].
//
// Offsets: every normalized character remembers the bytes of the input character it came from,
// so a token's span covers the input characters it was made of (e.g. `fu` from "Führer" spans
// "Fü"). [CLS]/[SEP] added by add_special get empty spans at the start/end of their text.
// Special tokens written in the text ("[MASK]") are recognised as such unless split_special is
// false.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/ustring.h>
#include <nlohmann/json.hpp>

#include "hf_folder_traits.hpp"
#include "json_file.hpp"
#include "masque/error.hpp"
#include "masque/params.hpp"
#include "masque/tokenizer.hpp"
#include "token_files.hpp"
#include "utf8.hpp"

namespace {

namespace fs = std::filesystem;
using masque::ByteSpan;
using masque::ConfigError;
using masque::Encoding;
using masque::TokenId;
using masque::tok::append_utf8;
using masque::tok::decode_utf8;

// Hugging Face tokenizers' is_chinese_char (normalizers/bert.rs). Note 0x2B920, not 0x2B820:
// the Rust code differs from Google's Python here, and the reference ids come from the Rust code.
bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool is_whitespace(char32_t c) {
  return c == '\t' || c == '\n' || c == '\r' || u_hasBinaryProperty(c, UCHAR_WHITE_SPACE);
}

// clean_text removes U+0000, U+FFFD and "other" characters (Cc, Cf, Co) except tab, LF, CR.
bool clean_removes(char32_t c) {
  if (c == 0 || c == 0xFFFD) return true;
  if (c == '\t' || c == '\n' || c == '\r') return false;
  const auto t = static_cast<UCharCategory>(u_charType(c));
  return t == U_CONTROL_CHAR || t == U_FORMAT_CHAR || t == U_PRIVATE_USE_CHAR;
}

bool is_ascii_punct(char32_t c) {
  return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
         (c >= 123 && c <= 126);
}

bool is_punct(char32_t c) {
  if (c < 128) return is_ascii_punct(c);
  switch (u_charType(c)) {
    case U_DASH_PUNCTUATION:
    case U_START_PUNCTUATION:
    case U_END_PUNCTUATION:
    case U_CONNECTOR_PUNCTUATION:
    case U_OTHER_PUNCTUATION:
    case U_INITIAL_PUNCTUATION:
    case U_FINAL_PUNCTUATION:
      return true;
    default:
      return false;
  }
}

// What the normalizer and pre-tokenizer do with an ASCII byte.
enum AsciiClass : std::uint8_t { kAsciiWord, kAsciiSpace, kAsciiPunct, kAsciiDrop };

struct AsciiTable {
  AsciiClass cls[128];
  AsciiTable() {
    for (char32_t c = 0; c < 128; ++c) {
      if (clean_removes(c))
        cls[c] = kAsciiDrop;
      else if (is_whitespace(c))
        cls[c] = kAsciiSpace;
      else if (is_ascii_punct(c))
        cls[c] = kAsciiPunct;
      else
        cls[c] = kAsciiWord;
    }
  }
};
const AsciiTable kAscii;

// One normalized character and the input bytes it came from.
struct NormChar {
  char32_t cp;
  std::uint32_t ob, oe;
};

class WordPiece final : public masque::Tokenizer {
 public:
  explicit WordPiece(const masque::Params& params) {
    const std::string& folder = params.get_string("path");
    std::string vocab_file = params.get_string("vocab");
    if (vocab_file.empty()) {
      if (folder.empty())
        throw ConfigError(
            "wordpiece: set `path` (a Hugging Face BERT folder) or `vocab` (vocab.txt)");
      vocab_file = (fs::path(folder) / "vocab.txt").string();
      if (!fs::exists(vocab_file))
        throw ConfigError("wordpiece: " + folder + " has no vocab.txt (set `vocab` to the file)");
    }
    pieces_ = masque::tok::read_token_lines(vocab_file, /*strip_cr=*/true);
    vocab_ = masque::tok::index_tokens(pieces_, vocab_file);
    for (std::size_t id = 0; id < pieces_.size(); ++id) {
      const std::string& token = pieces_[id];
      if (token.size() > 2 && token.compare(0, 2, "##") == 0) {
        continuation_.insert(std::string_view(token).substr(2), static_cast<TokenId>(id));
        max_cont_bytes_ = std::max(max_cont_bytes_, token.size() - 2);
      }
      max_word_bytes_ = std::max(max_word_bytes_, token.size());
    }

    // tokenizer_config.json (optional) in the folder: do_lower_case, strip_accents.
    std::optional<bool> cfg_lower, cfg_strip;
    if (!folder.empty()) {
      const fs::path cfg_file = fs::path(folder) / "tokenizer_config.json";
      if (fs::exists(cfg_file)) {
        const nlohmann::json cfg =
            masque::tok::read_json_file(cfg_file.string(), "tokenizer configuration");
        if (cfg.contains("do_lower_case") && cfg["do_lower_case"].is_boolean())
          cfg_lower = cfg["do_lower_case"].get<bool>();
        if (cfg.contains("strip_accents") && cfg["strip_accents"].is_boolean())
          cfg_strip = cfg["strip_accents"].get<bool>();
      }
    }
    const auto lower = masque::tok::parse_tristate(params.get_string("lowercase"));
    lowercase_ = lower == masque::tok::Tristate::automatic ? cfg_lower.value_or(true)
                                                           : lower == masque::tok::Tristate::yes;
    const auto strip = masque::tok::parse_tristate(params.get_string("strip_accents"));
    strip_accents_ =
        strip == masque::tok::Tristate::automatic
            ? cfg_strip.value_or(lowercase_)  // HF: strip_accents None follows lowercase
            : strip == masque::tok::Tristate::yes;
    max_chars_ = static_cast<std::size_t>(params.get_int("max_chars_per_word"));

    auto find = [&](const char* t) { return vocab_.find(t); };
    special_.unk = find("[UNK]");
    special_.cls = find("[CLS]");
    special_.sep = find("[SEP]");
    special_.pad = find("[PAD]");
    special_.mask = find("[MASK]");
    if (special_.unk < 0)
      throw ConfigError(vocab_file + ": the vocabulary has no [UNK] token, which WordPiece needs");
    if (params.get_bool("split_special"))
      for (const char* t : {"[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]"})
        if (TokenId id = find(t); id >= 0) specials_in_text_.add(t, id);

    UErrorCode status = U_ZERO_ERROR;
    nfd_ = icu::Normalizer2::getNFDInstance(status);
    if (U_FAILURE(status))
      throw ConfigError(std::string("wordpiece: ICU NFD: ") + u_errorName(status));
  }

  Encoding encode(std::string_view text, bool add_special) const override {
    masque::tok::check_utf8(text, "wordpiece");
    Encoding out;
    if (add_special) push_added(out, special_.cls, 0, 0, "[CLS]");
    encode_text(text, out, 0);
    if (add_special)
      push_added(out, special_.sep, static_cast<std::uint32_t>(text.size()), 0, "[SEP]");
    return out;
  }

  // [CLS] first [SEP] second [SEP]; type ids 0 up to the first [SEP], 1 after. Offsets of the
  // second text's tokens are into `second`.
  Encoding encode_pair(std::string_view first, std::string_view second,
                       bool add_special) const override {
    masque::tok::check_utf8(first, "wordpiece");
    masque::tok::check_utf8(second, "wordpiece");
    Encoding out;
    if (add_special) push_added(out, special_.cls, 0, 0, "[CLS]");
    encode_text(first, out, 0);
    if (add_special)
      push_added(out, special_.sep, static_cast<std::uint32_t>(first.size()), 0, "[SEP]");
    encode_text(second, out, 1);
    if (add_special)
      push_added(out, special_.sep, static_cast<std::uint32_t>(second.size()), 1, "[SEP]");
    return out;
  }

  // What transformers' BertTokenizerFast.decode gives: the WordPiece decoder ("##" pieces glue
  // to the previous one, others get a space; its cleanup on each token), then
  // clean_up_tokenization on the whole text (so "don ' t" becomes "don't").
  std::string decode(std::span<const TokenId> ids, bool skip_special) const override {
    std::string out;
    bool first = true;
    for (TokenId id : ids) {
      check_id(id);
      if (skip_special && is_special(id)) continue;
      std::string token = pieces_[id];
      if (!first) {
        if (token.size() >= 2 && token.compare(0, 2, "##") == 0)
          token.erase(0, 2);
        else
          token.insert(0, " ");
      }
      first = false;
      out += cleanup(std::move(token), true);
    }
    return cleanup(std::move(out), false);
  }

  std::int32_t vocab_size() const override { return static_cast<std::int32_t>(pieces_.size()); }
  std::string id_to_piece(TokenId id) const override {
    return id >= 0 && id < vocab_size() ? pieces_[id] : std::string();
  }
  std::optional<TokenId> piece_to_id(std::string_view piece) const override {
    const TokenId id = vocab_.find(piece);
    if (id < 0) return std::nullopt;
    return id;
  }
  const masque::SpecialTokens& special_tokens() const override { return special_; }

 private:
  // Per-call scratch state: the word being built and the pending run of combining marks.
  struct State {
    Encoding* out;
    std::int32_t type_id;
    std::string word;                   // normalized UTF-8
    std::vector<std::uint32_t> ob, oe;  // input span of each byte of `word`
    std::vector<NormChar> marks;        // NFD characters with ccc > 0, not yet ordered
    std::vector<TokenId> ids;           // WordPiece scratch
    std::vector<ByteSpan> spans;
  };

  void check_id(TokenId id) const {
    if (id < 0 || id >= vocab_size())
      throw masque::RecordError("wordpiece: token id " + std::to_string(id) +
                                " is outside the vocabulary (0.." +
                                std::to_string(vocab_size() - 1) + ")");
  }

  void push_added(Encoding& out, TokenId id, std::uint32_t at, std::int32_t type,
                  const char* name) const {
    if (id < 0)
      throw ConfigError(std::string("wordpiece: the vocabulary has no ") + name + " token");
    push(out, id, {at, at}, type);
  }

  void push(Encoding& out, TokenId id, ByteSpan span, std::int32_t type) const {
    out.ids.push_back(id);
    out.pieces.push_back(pieces_[id]);
    out.offsets.push_back(span);
    out.type_ids.push_back(type);
  }

  void encode_text(std::string_view text, Encoding& out, std::int32_t type) const {
    State st{&out, type, {}, {}, {}, {}, {}, {}};
    specials_in_text_.split(
        text, [&](std::size_t b, std::size_t e) { encode_segment(text, b, e, st); },
        [&](std::size_t b, std::size_t e, TokenId id) {
          push(out, id, {static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(e)}, type);
        });
  }

  void encode_segment(std::string_view text, std::size_t begin, std::size_t end, State& st) const {
    std::size_t i = begin;
    while (i < end) {
      const auto b = static_cast<unsigned char>(text[i]);
      const auto ob = static_cast<std::uint32_t>(i);
      if (b < 0x80) {  // ASCII: no decomposition, combining class 0, simple lowercase
        ++i;
        const AsciiClass cls = kAscii.cls[b];
        if (cls == kAsciiDrop) continue;
        if (!st.marks.empty()) flush_marks(st);
        if (cls == kAsciiSpace) {
          end_word(st);
        } else if (cls == kAsciiPunct) {
          end_word(st);
          append(st, b, ob, ob + 1);
          end_word(st);
        } else {
          append(st, lowercase_ && b >= 'A' && b <= 'Z' ? b + 32 : b, ob, ob + 1);
        }
        continue;
      }
      char32_t cp = 0;
      const int len = decode_utf8(text, i, cp);  // valid: checked by the caller
      i += static_cast<std::size_t>(len);
      const auto oe = static_cast<std::uint32_t>(i);
      if (clean_removes(cp)) continue;
      if (is_whitespace(cp)) {
        feed_nfd({' ', ob, oe}, st);
      } else if (is_chinese_char(cp)) {
        feed_nfd({' ', ob, oe}, st);
        feed(cp, ob, oe, st);
        feed_nfd({' ', ob, oe}, st);
      } else {
        feed(cp, ob, oe, st);
      }
    }
    flush_marks(st);
    end_word(st);
  }

  // Decomposes (when stripping accents) and passes on one cleaned character.
  void feed(char32_t cp, std::uint32_t ob, std::uint32_t oe, State& st) const {
    if (!strip_accents_) {
      emit({cp, ob, oe}, st);
      return;
    }
    icu::UnicodeString decomposition;
    if (!nfd_->getDecomposition(static_cast<UChar32>(cp), decomposition)) {
      feed_nfd({cp, ob, oe}, st);
      return;
    }
    for (int32_t k = 0; k < decomposition.length();) {
      const UChar32 c = decomposition.char32At(k);
      feed_nfd({static_cast<char32_t>(c), ob, oe}, st);
      k += U16_LENGTH(c);
    }
  }

  // NFD's canonical ordering: a run of characters with a nonzero combining class is stably
  // sorted by class before anything else looks at it.
  void feed_nfd(NormChar c, State& st) const {
    if (!strip_accents_) {
      emit(c, st);
      return;
    }
    if (u_getCombiningClass(static_cast<UChar32>(c.cp)) != 0) {
      st.marks.push_back(c);
      return;
    }
    flush_marks(st);
    emit(c, st);
  }

  void flush_marks(State& st) const {
    if (st.marks.empty()) return;
    std::stable_sort(st.marks.begin(), st.marks.end(), [](const NormChar& a, const NormChar& b) {
      return u_getCombiningClass(static_cast<UChar32>(a.cp)) <
             u_getCombiningClass(static_cast<UChar32>(b.cp));
    });
    for (const NormChar& m : st.marks) emit(m, st);
    st.marks.clear();
  }

  // After NFD: drop nonspacing marks, lowercase, then pre-tokenize.
  void emit(NormChar c, State& st) const {
    if (strip_accents_ && u_charType(static_cast<UChar32>(c.cp)) == U_NON_SPACING_MARK) return;
    if (!lowercase_ || c.cp < 0x80) {
      const char32_t lc = lowercase_ && c.cp >= 'A' && c.cp <= 'Z' ? c.cp + 32 : c.cp;
      pretokenize({lc, c.ob, c.oe}, st);
      return;
    }
    // Full lowercase mapping of the code point on its own: no context (final sigma) and no
    // locale (Turkish/Lithuanian) rules, like Rust's char::to_lowercase.
    UChar src[2];
    int32_t src_len = 0;
    U16_APPEND_UNSAFE(src, src_len, static_cast<UChar32>(c.cp));
    UChar dst[8];
    UErrorCode status = U_ZERO_ERROR;
    const int32_t n = u_strToLower(dst, 8, src, src_len, "", &status);
    if (U_FAILURE(status) || n > 8) {
      pretokenize(c, st);
      return;
    }
    for (int32_t k = 0; k < n;) {
      UChar32 lc;
      U16_NEXT_UNSAFE(dst, k, lc);
      pretokenize({static_cast<char32_t>(lc), c.ob, c.oe}, st);
    }
  }

  void pretokenize(NormChar c, State& st) const {
    if (is_whitespace(c.cp)) {
      end_word(st);
    } else if (is_punct(c.cp)) {
      end_word(st);
      append(st, c.cp, c.ob, c.oe);
      end_word(st);
    } else {
      append(st, c.cp, c.ob, c.oe);
    }
  }

  static void append(State& st, char32_t cp, std::uint32_t ob, std::uint32_t oe) {
    append_utf8(st.word, cp);
    st.ob.resize(st.word.size(), ob);
    st.oe.resize(st.word.size(), oe);
  }

  ByteSpan span_of(const State& st, std::size_t b, std::size_t e) const {
    std::uint32_t lo = st.ob[b], hi = st.oe[b];
    for (std::size_t k = b + 1; k < e; ++k) {
      lo = std::min(lo, st.ob[k]);
      hi = std::max(hi, st.oe[k]);
    }
    return {lo, hi};
  }

  // WordPiece on the finished word: greedy longest match first.
  void end_word(State& st) const {
    if (st.word.empty()) return;
    const std::string_view w = st.word;
    const std::size_t n = w.size();
    std::size_t chars = 0;
    for (char ch : w) chars += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
    st.ids.clear();
    st.spans.clear();
    bool bad = chars > max_chars_;
    for (std::size_t start = 0; start < n && !bad;) {
      const masque::tok::TokenMap& map = start == 0 ? vocab_ : continuation_;
      std::size_t end = std::min(n, start + (start == 0 ? max_word_bytes_ : max_cont_bytes_));
      while (end < n && (static_cast<unsigned char>(w[end]) & 0xC0) == 0x80) --end;
      TokenId found = -1;
      while (end > start) {
        found = map.find(w.substr(start, end - start));
        if (found >= 0) break;
        do --end;
        while (end > start && (static_cast<unsigned char>(w[end]) & 0xC0) == 0x80);
      }
      if (found < 0) {
        bad = true;
        break;
      }
      st.ids.push_back(found);
      st.spans.push_back(span_of(st, start, end));
      start = end;
    }
    if (bad) {
      push(*st.out, special_.unk, span_of(st, 0, n), st.type_id);
    } else {
      for (std::size_t k = 0; k < st.ids.size(); ++k)
        push(*st.out, st.ids[k], st.spans[k], st.type_id);
    }
    st.word.clear();
    st.ob.clear();
    st.oe.clear();
  }

  // Hugging Face's cleanup (the decoder's has " do not" -> " don't"; transformers' does not).
  static std::string cleanup(std::string s, bool decoder_rules) {
    static const std::pair<std::string_view, std::string_view> kRules[] = {
        {" .", "."},   {" ?", "?"},     {" !", "!"},    {" ,", ","},
        {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},  {" do not", " don't"},
        {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    for (const auto& [from, to] : kRules) {
      if (!decoder_rules && from == " do not") continue;
      std::size_t pos = 0;
      while ((pos = s.find(from, pos)) != std::string::npos) {
        s.replace(pos, from.size(), to);
        pos += to.size();
      }
    }
    return s;
  }

  std::vector<std::string> pieces_;
  masque::tok::TokenMap vocab_;         // every entry
  masque::tok::TokenMap continuation_;  // "##x" entries, keyed by x
  std::size_t max_word_bytes_ = 0, max_cont_bytes_ = 0;
  bool lowercase_ = true, strip_accents_ = true;
  std::size_t max_chars_ = 100;
  masque::SpecialTokens special_;
  masque::tok::SpecialSplitter specials_in_text_;
  const icu::Normalizer2* nfd_ = nullptr;
};

masque::Plugin* create(const masque::Params& params) {
  return new WordPiece(params);
}

const masque::ParamSpec kParams[] = {
    {.name = "path",
     .type = masque::ParamType::path,
     .default_value = "",
     .help = "Hugging Face BERT folder: vocab.txt, and tokenizer_config.json if present "
             "(its do_lower_case and strip_accents are used when lowercase/strip_accents are "
             "auto)"},
    {.name = "vocab",
     .type = masque::ParamType::path,
     .default_value = "",
     .help = "vocab.txt to use instead of path/vocab.txt (one token per line, id = line - 1)"},
    {.name = "lowercase",
     .type = masque::ParamType::string,
     .default_value = "auto",
     .help = "lowercase each code point (no context: a final capital sigma becomes σ); auto = "
             "do_lower_case of path/tokenizer_config.json, or true when there is none (like "
             "Hugging Face's BertTokenizer)",
     .choices = "auto|true|false"},
    {.name = "strip_accents",
     .type = masque::ParamType::string,
     .default_value = "auto",
     .help = "decompose (NFD) and drop nonspacing marks (Führer -> fuhrer); auto = "
             "strip_accents of tokenizer_config.json if it is true/false, else the same as "
             "lowercase (Hugging Face's strip_accents=None)",
     .choices = "auto|true|false"},
    {.name = "max_chars_per_word",
     .type = masque::ParamType::integer,
     .default_value = "100",
     .help = "a word longer than this many code points (after normalization) becomes [UNK]",
     .min = 1,
     .max = 1e9},
    {.name = "split_special",
     .type = masque::ParamType::boolean,
     .default_value = "true",
     .help = "recognise [CLS] [SEP] [MASK] [PAD] [UNK] written in the text as those tokens "
             "(Hugging Face's added tokens); false tokenizes them as ordinary text"},
};

// A folder's vocab.txt (BERT's); the checkpoint of a training that set lowercase or
// strip_accents says so in tokenizer_config.json, which this plugin reads back.
const masque::TokenizerFolderFiles kReads[] = {{.files = "vocab.txt"}};
const masque::TokenizerTraits kTraits{
    .reads = kReads,
    .num_reads = 1,
    .preference = 10,
    .carries = masque::tok::kHfTokenizerCarries,
    .saved_settings = "lowercase=do_lower_case strip_accents=strip_accents",
    .config_class = "BertTokenizer"};

const masque::PluginDescriptor* descriptor() {
  static const masque::PluginDescriptor d{
      .kind = masque::PluginKind::tokenizer,
      .name = "wordpiece",
      .version = "1.0.0",
      .license = "MIT",
      .description = "BERT WordPiece (Hugging Face BertNormalizer + BertPreTokenizer + WordPiece)",
      .params = kParams,
      .num_params = sizeof(kParams) / sizeof(kParams[0]),
      .create = create,
      .tokenizer = &kTraits,
  };
  return &d;
}

}  // namespace

MASQUE_PLUGIN(descriptor)

// The `wordpiece` tokenizer against Hugging Face's ids for bert-base-uncased and
// bert-base-chinese, and its normalization rules one by one.
#include <catch2/catch.hpp>

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include "masque/error.hpp"
#include "tok_test_util.hpp"

using namespace masque;
using namespace masque::test;
using namespace std::string_literals;

namespace {

std::unique_ptr<Tokenizer> uncased() {
  return tokenizer("wordpiece", {{"path", (tokenizers_dir() / "bert-base-uncased").string()}});
}

std::unique_ptr<Tokenizer> chinese(bool lowercase) {
  return tokenizer("wordpiece", {{"path", (tokenizers_dir() / "bert-base-chinese").string()},
                                 {"lowercase", std::string(lowercase ? "true" : "false")}});
}

// Independent of the plugin: lowercase, NFD, drop Mn (ICU's whole-string functions; the texts
// checked with it have no final capital sigma, where per-code-point and contextual differ).
std::string normalize_lower_strip(const std::string& s) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(s);
  u.toLower(icu::Locale::getRoot());
  UErrorCode st = U_ZERO_ERROR;
  icu::UnicodeString d = icu::Normalizer2::getNFDInstance(st)->normalize(u, st);
  icu::UnicodeString kept;
  for (int32_t i = 0; i < d.length();) {
    UChar32 c = d.char32At(i);
    if (u_charType(c) != U_NON_SPACING_MARK) kept.append(c);
    i += U16_LENGTH(c);
  }
  std::string out;
  kept.toUTF8String(out);
  return out;
}

std::string body(const std::string& piece) {
  return piece.rfind("##", 0) == 0 ? piece.substr(2) : piece;
}

struct VectorResult {
  std::size_t total = 0, matched = 0;
};

// Every vector: ids exact, [CLS] ids [SEP] with add_special, spans in bounds; for tokens other
// than [UNK], the input bytes at the span normalize to the piece (when `normalized_check`).
VectorResult check_vectors(const Tokenizer& tok, const std::filesystem::path& file,
                           bool normalized_check) {
  VectorResult r;
  const TokenId cls = tok.special_tokens().cls, sep = tok.special_tokens().sep;
  for (const auto& v : read_jsonl(file)) {
    const std::string text = v["text"];
    const auto expected = ids_of(v["ids"]);
    ++r.total;
    const Encoding e = tok.encode(text, false);
    CHECK(consistent(e));
    CHECK(spans_in_bounds(e, text.size()));
    INFO(file.filename().string() << ": " << text);
    CHECK(e.ids == expected);
    if (e.ids == expected) ++r.matched;
    const Encoding s = tok.encode(text, true);
    std::vector<TokenId> with = {cls};
    with.insert(with.end(), expected.begin(), expected.end());
    with.push_back(sep);
    CHECK(s.ids == with);
    CHECK(s.offsets.front() == ByteSpan{0, 0});
    CHECK(s.offsets.back() == ByteSpan{static_cast<std::uint32_t>(text.size()),
                                       static_cast<std::uint32_t>(text.size())});
    if (normalized_check) {
      for (std::size_t k = 0; k < e.ids.size(); ++k) {
        if (e.ids[k] == tok.special_tokens().unk) continue;
        INFO("token " << k << " " << e.pieces[k]);
        CHECK(normalize_lower_strip(slice(text, e.offsets[k])) == body(e.pieces[k]));
      }
    }
  }
  return r;
}

std::vector<std::string> pieces(const Tokenizer& tok, const std::string& text) {
  return tok.encode(text, false).pieces;
}

}  // namespace

TEST_CASE("wordpiece reproduces bert-base-uncased vectors", "[wordpiece][vectors]") {
  auto tok = uncased();
  const auto r =
      check_vectors(*tok, tokenizers_dir() / "bert-base-uncased" / "vectors.jsonl", true);
  WARN("bert-base-uncased/vectors.jsonl: " << r.matched << "/" << r.total << " matched");
  CHECK(r.total == 46);
  CHECK(r.matched == r.total);
}

TEST_CASE("wordpiece reproduces bert-base-chinese vectors (published config, no lowercase)",
          "[wordpiece][vectors]") {
  auto tok = chinese(false);
  const auto r =
      check_vectors(*tok, tokenizers_dir() / "bert-base-chinese" / "vectors.jsonl", false);
  WARN("bert-base-chinese/vectors.jsonl: " << r.matched << "/" << r.total << " matched");
  CHECK(r.total == 46);
  CHECK(r.matched == r.total);
}

TEST_CASE("wordpiece reproduces bert-base-chinese vectors with lowercase", "[wordpiece][vectors]") {
  auto tok = chinese(true);
  const auto r =
      check_vectors(*tok, tokenizers_dir() / "bert-base-chinese" / "vectors_lowercase.jsonl", true);
  WARN("bert-base-chinese/vectors_lowercase.jsonl: " << r.matched << "/" << r.total << " matched");
  CHECK(r.total == 46);
  CHECK(r.matched == r.total);
}

TEST_CASE("wordpiece: Chinese text is one token per character", "[wordpiece]") {
  for (bool lower : {false, true}) {
    auto tok = chinese(lower);
    for (const std::string text : {"北京欢迎你", "你想吃啥 白切鸡"}) {
      const Encoding e = tok->encode(text, false);
      std::vector<std::string> chars;
      for (std::size_t i = 0; i < text.size();) {
        if (text[i] == ' ') {
          ++i;
          continue;
        }
        chars.push_back(text.substr(i, 3));  // all of these are 3-byte characters
        i += 3;
      }
      CHECK(e.pieces == chars);
      for (std::size_t k = 0; k < e.ids.size(); ++k) {
        CHECK(e.ids[k] != tok->special_tokens().unk);
        CHECK(slice(text, e.offsets[k]) == chars[k]);
      }
    }
  }
  // The vocabulary holds two U+2028 entries (ids 343 and 13502): read on '\n' only, the ids
  // after them are where Hugging Face has them.
  auto tok = chinese(false);
  CHECK(tok->id_to_piece(343) == "\u2028");
  CHECK(tok->id_to_piece(13502) == "##\u2028");
  CHECK(tok->piece_to_id("北") == 1266);
  CHECK(tok->vocab_size() == 21128);
}

TEST_CASE("wordpiece: byte spans of normalized tokens", "[wordpiece][offsets]") {
  auto tok = uncased();
  Encoding e = tok->encode("Führer", false);
  CHECK(e.pieces == std::vector<std::string>{"fu", "##hrer"});
  CHECK(e.offsets == std::vector<ByteSpan>{{0, 3}, {3, 7}});  // "Fü" is 3 bytes

  e = tok->encode("  Cửa\tViệt!", false);
  REQUIRE(e.pieces == std::vector<std::string>{"cu", "##a", "viet", "!"});
  CHECK(slice("  Cửa\tViệt!", e.offsets[0]) == "Cử");
  CHECK(slice("  Cửa\tViệt!", e.offsets[1]) == "a");
  CHECK(slice("  Cửa\tViệt!", e.offsets[2]) == "Việt");
  CHECK(slice("  Cửa\tViệt!", e.offsets[3]) == "!");

  auto zh = chinese(true);
  const std::string text = "Hello 北京!";
  e = zh->encode(text, false);
  CHECK(e.pieces == std::vector<std::string>{"hello", "北", "京", "!"});
  CHECK(e.offsets == std::vector<ByteSpan>{{0, 5}, {6, 9}, {9, 12}, {12, 13}});

  // [UNK] for a whole word spans the word; an astral CJK ideograph (Extension B) is its own
  // word, judged per code point.
  const std::string astral = "a\U00020000b";
  e = zh->encode(astral, false);
  CHECK(e.pieces == std::vector<std::string>{"a", "[UNK]", "b"});
  CHECK(e.offsets == std::vector<ByteSpan>{{0, 1}, {1, 5}, {5, 6}});
}

TEST_CASE("wordpiece: cleaning, whitespace and punctuation", "[wordpiece]") {
  auto tok = uncased();
  // NBSP, U+3000, U+2028 and other White_Space characters separate words.
  CHECK(pieces(*tok, "a\u00a0b\u3000c\u2028d\u2009e\u0085f") ==
        std::vector<std::string>{"a", "b", "c", "d", "e", "##f"});
  // NEL (U+0085) is a control character: removed before whitespace is mapped, so "ef" is a word.
  // Format (ZWSP, ZWJ, soft hyphen), private use, U+FFFD and NUL are dropped inside words.
  CHECK(pieces(*tok, "th\u200bi\u00ads\ufffd\U000F0000 w\0ord"s) ==
        std::vector<std::string>{"this", "word"});
  // ASCII punctuation as BERT counts it (including $ + < = > ^ ` | ~) and Unicode P*.
  CHECK(pieces(*tok, "$5+3=8") == std::vector<std::string>{"$", "5", "+", "3", "=", "8"});
  CHECK(pieces(*tok, "«hi»—ok") == std::vector<std::string>{"«", "hi", "»", "—", "ok"});
  // Per-code-point lowercasing: a final capital sigma becomes σ (##σ), not ς (##ς).
  const Encoding sigma = tok->encode("ΟΔΟΣ", false);
  REQUIRE(!sigma.pieces.empty());
  CHECK(sigma.pieces.back() == "##σ");
  CHECK(sigma.offsets.back() == ByteSpan{6, 8});
  // İ: NFD splits the dot above off, and it is a nonspacing mark.
  CHECK(pieces(*tok, "İstanbul") == pieces(*tok, "istanbul"));
}

TEST_CASE("wordpiece: lowercase / strip_accents / tokenizer_config.json", "[wordpiece]") {
  const std::string vocab = (tokenizers_dir() / "bert-base-uncased" / "vocab.txt").string();
  auto cased = tokenizer("wordpiece", {{"vocab", vocab}, {"lowercase", std::string("false")}});
  CHECK(pieces(*cased, "Hello") == std::vector<std::string>{"[UNK]"});
  auto keep_accents =
      tokenizer("wordpiece", {{"vocab", vocab}, {"strip_accents", std::string("false")}});
  // Lowercased but not stripped: the uncased vocabulary has no accented letters.
  CHECK(pieces(*keep_accents, "Führer") == std::vector<std::string>{"[UNK]"});
  CHECK(pieces(*keep_accents, "FUHRER") == std::vector<std::string>{"fu", "##hrer"});
  CHECK(pieces(*uncased(), "Café") == std::vector<std::string>{"cafe"});

  // auto follows do_lower_case of tokenizer_config.json in `path`.
  const auto dir = scratch_dir("wordpiece_config");
  write_file(dir / "tokenizer_config.json", R"({"do_lower_case": false, "strip_accents": null})");
  auto from_cfg = tokenizer("wordpiece", {{"path", dir.string()}, {"vocab", vocab}});
  CHECK(pieces(*from_cfg, "Hello") == std::vector<std::string>{"[UNK]"});
  write_file(dir / "tokenizer_config.json", R"({"do_lower_case": true})");
  auto lower_cfg = tokenizer("wordpiece", {{"path", dir.string()}, {"vocab", vocab}});
  CHECK(pieces(*lower_cfg, "Hello Führer") == std::vector<std::string>{"hello", "fu", "##hrer"});
  write_file(dir / "tokenizer_config.json", "{not json");
  CHECK_THROWS_AS(tokenizer("wordpiece", {{"path", dir.string()}, {"vocab", vocab}}), ConfigError);
}

TEST_CASE("wordpiece: long words, special tokens, pairs and decode", "[wordpiece]") {
  auto tok = uncased();
  const TokenId unk = tok->special_tokens().unk;
  CHECK(tok->encode(std::string(101, 'a'), false).ids == std::vector<TokenId>{unk});
  const Encoding hundred = tok->encode(std::string(100, 'a'), false);
  CHECK(hundred.ids.size() > 1);
  CHECK(hundred.offsets.back().end == 100);
  auto short_words =
      tokenizer("wordpiece", {{"path", (tokenizers_dir() / "bert-base-uncased").string()},
                              {"max_chars_per_word", std::int64_t{5}}});
  CHECK(pieces(*short_words, "hello worlds") == std::vector<std::string>{"hello", "[UNK]"});

  // Special tokens written in the text.
  const std::string masked = "Paris is the [MASK] of France.";
  Encoding e = tok->encode(masked, true);
  CHECK(e.ids == std::vector<TokenId>{101, 3000, 2003, 1996, 103, 1997, 2605, 1012, 102});
  CHECK(e.offsets[4] == ByteSpan{13, 19});
  auto literal = tokenizer(
      "wordpiece",
      {{"path", (tokenizers_dir() / "bert-base-uncased").string()}, {"split_special", false}});
  CHECK(literal->encode("[MASK]", false).pieces == std::vector<std::string>{"[", "mask", "]"});

  // [CLS] a [SEP] b [SEP], type ids 0 then 1; spans into each text.
  e = tok->encode_pair("Hello world", "How are you?", true);
  CHECK(e.ids == std::vector<TokenId>{101, 7592, 2088, 102, 2129, 2024, 2017, 1029, 102});
  CHECK(e.type_ids == std::vector<std::int32_t>{0, 0, 0, 0, 1, 1, 1, 1, 1});
  CHECK(e.offsets[1] == ByteSpan{0, 5});
  CHECK(e.offsets[3] == ByteSpan{11, 11});
  CHECK(e.offsets[4] == ByteSpan{0, 3});
  CHECK(e.offsets[8] == ByteSpan{12, 12});
  CHECK(consistent(e));

  // Hugging Face's WordPiece decoder with its cleanup.
  e = tok->encode("Hello, world! Don't stop.", true);
  CHECK(tok->decode(e.ids, true) == "hello, world! don't stop.");
  CHECK(tok->decode(e.ids, false) == "[CLS] hello, world! don't stop. [SEP]");
  CHECK(tok->decode(tok->encode("unaffable", false).ids, false) == "unaffable");
  CHECK_THROWS_AS(tok->decode(std::vector<TokenId>{5, 999999}, false), RecordError);
}

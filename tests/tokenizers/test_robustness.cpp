// Hostile input for every tokenizer: invalid UTF-8, NUL bytes, encoded surrogates, huge words.
#include <catch2/catch.hpp>

#include <chrono>
#include <sstream>
#include <thread>

#include "masque/error.hpp"
#include "tok_test_util.hpp"

using namespace masque;
using namespace masque::test;
using namespace std::string_literals;

namespace {

std::vector<std::pair<std::string, std::unique_ptr<Tokenizer>>> all_tokenizers() {
  std::vector<std::pair<std::string, std::unique_ptr<Tokenizer>>> v;
  v.emplace_back(
      "wordpiece",
      tokenizer("wordpiece", {{"path", (tokenizers_dir() / "bert-base-uncased").string()}}));
  v.emplace_back(
      "wordpiece-zh",
      tokenizer("wordpiece", {{"path", (tokenizers_dir() / "bert-base-chinese").string()}}));
  v.emplace_back("bpe", tokenizer("bpe", {{"path", (tokenizers_dir() / "gpt2").string()}}));
  v.emplace_back(
      "sentencepiece",
      tokenizer("sentencepiece", {{"path", (shared_dir() / "models" / "stories260k").string()}}));
  v.emplace_back(
      "vocab",
      tokenizer(
          "vocab",
          {{"vocab",
            (shared_dir() / "models" / "aren-transliteration" / "source_vocab.txt").string()}}));
  return v;
}

}  // namespace

TEST_CASE("invalid UTF-8 is a RecordError for every tokenizer", "[robustness]") {
  const std::vector<std::string> bad = {
      "\xff",                      // never valid
      "abc\xc3",                   // truncated 2-byte sequence at the end
      "a\xe4\xb8 b",               // truncated 3-byte sequence
      "\xed\xa0\x80",              // U+D800, a lone (high) surrogate encoded in UTF-8
      "x\xed\xbf\xbfy",            // U+DFFF
      "\xed\xa0\xbd\xed\xb8\x80",  // a surrogate pair encoded as CESU-8
      "\xc0\xaf",                  // overlong '/'
      "\xe0\x80\xaf",              // overlong '/'
      "\xf4\x90\x80\x80",          // above U+10FFFF
      "\x80 continuation first",
      "ok \xf0\x9f\xa6",  // emoji cut short
  };
  for (auto& [name, tok] : all_tokenizers()) {
    for (const auto& s : bad) {
      INFO(name << ": " << hex_bytes(s));
      CHECK_THROWS_AS(tok->encode(s, false), RecordError);
      CHECK_THROWS_AS(tok->encode(s, true), RecordError);
    }
  }
}

TEST_CASE("NUL bytes and control characters do not break tokenizers", "[robustness]") {
  const std::string text = "a\0b \0\0 c\x01\x7f\x1b[0m end\0"s;
  for (auto& [name, tok] : all_tokenizers()) {
    INFO(name);
    const Encoding e = tok->encode(text, true);
    CHECK(consistent(e));
    CHECK(spans_in_bounds(e, text.size()));
  }
  auto wp = tokenizer("wordpiece", {{"path", (tokenizers_dir() / "bert-base-uncased").string()}});
  CHECK(wp->encode("a\0b"s, false).pieces == std::vector<std::string>{"ab"});  // NUL is dropped
  auto bpe = tokenizer("bpe", {{"path", (tokenizers_dir() / "gpt2").string()}});
  CHECK(bpe->decode(bpe->encode(text, false).ids, false) == text);
}

TEST_CASE("100k-character words", "[robustness]") {
  std::string word;
  for (int i = 0; i < 100000; ++i) word += static_cast<char>('a' + (i * 7919 % 26));
  const std::string cjk_word = [] {
    std::string s;
    for (int i = 0; i < 20000; ++i) s += "\xc3\xa9";  // é, 2 bytes each
    return s;
  }();
  for (auto& [name, tok] : all_tokenizers()) {
    INFO(name);
    for (const std::string& w : {word, cjk_word, std::string(100000, 'a')}) {
      const auto start = std::chrono::steady_clock::now();
      const Encoding e = tok->encode(w, false);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      CHECK(consistent(e));
      CHECK(spans_in_bounds(e, w.size()));
      CHECK(!e.ids.empty());
      CHECK(seconds < 10.0);
    }
  }
  auto wp = tokenizer("wordpiece", {{"path", (tokenizers_dir() / "bert-base-uncased").string()}});
  const Encoding e = wp->encode(word, false);
  CHECK(e.pieces == std::vector<std::string>{"[UNK]"});
  CHECK(e.offsets.front() == ByteSpan{0, 100000});
  auto bpe = tokenizer("bpe", {{"path", (tokenizers_dir() / "gpt2").string()}});
  CHECK(bpe->decode(bpe->encode(word, false).ids, false) == word);
}

TEST_CASE("every tokenizer gives the same results from several threads at once",
          "[robustness][threads]") {
  std::vector<std::string> texts;
  for (const char* dir : {"bert-base-uncased", "gpt2", "stories260k"})
    for (const auto& v : read_jsonl(tokenizers_dir() / dir / "vectors.jsonl"))
      texts.push_back(v["text"]);
  std::istringstream corpus(
      read_file(source_dir() / "tests" / "tokenizers" / "data" / "multilingual.txt"));
  for (std::string line; std::getline(corpus, line);) texts.push_back(line);
  for (auto& [name, tok] : all_tokenizers()) {
    INFO(name);
    std::vector<std::vector<TokenId>> expected;
    for (const auto& t : texts) expected.push_back(tok->encode(t, true).ids);
    std::vector<int> mismatches(3, 0);
    std::vector<std::thread> threads;
    const auto& tokenizer = tok;  // (clang 14 cannot capture a structured binding)
    for (int th = 0; th < 3; ++th)
      threads.emplace_back([&, th] {
        for (int rep = 0; rep < 4; ++rep)
          for (std::size_t i = (th + rep) % texts.size(); i < texts.size(); i += 1)
            mismatches[th] += tokenizer->encode(texts[i], true).ids != expected[i];
      });
    for (auto& t : threads) t.join();
    CHECK(mismatches == std::vector<int>(3, 0));
  }
}

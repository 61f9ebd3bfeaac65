// The `bpe` tokenizer against the GPT-2 vectors (Hugging Face / tiktoken ids), its hand-written
// pre-tokenizer against the ICU regex, and its merges against a plain reference BPE.
#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>
#include <random>
#include <thread>

#include "masque/error.hpp"
#include "pretokenizer.hpp"
#include "tok_test_util.hpp"

using namespace masque;
using namespace masque::test;
using namespace std::string_literals;

namespace {

std::filesystem::path gpt2_dir() {
  return tokenizers_dir() / "gpt2";
}

std::unique_ptr<Tokenizer> gpt2(const std::map<std::string, ParamValue>& extra = {}) {
  std::map<std::string, ParamValue> p = extra;
  p["path"] = gpt2_dir().string();
  return tokenizer("bpe", p);
}

std::vector<std::string> vector_texts(const std::filesystem::path& file) {
  std::vector<std::string> out;
  for (const auto& v : read_jsonl(file)) out.push_back(v["text"]);
  return out;
}

// A deliberately plain BPE written from OpenAI's encoder.py: regex pieces (ICU), bytes to
// unicode, then repeatedly merge every occurrence of the lowest-ranked pair.
class ReferenceBpe {
 public:
  ReferenceBpe() {
    const auto vocab = nlohmann::json::parse(read_file(gpt2_dir() / "vocab.json"));
    for (const auto& [k, v] : vocab.items()) ids_[k] = v.get<TokenId>();
    std::istringstream merges(read_file(gpt2_dir() / "merges.txt"));
    std::string line;
    int rank = 0;
    while (std::getline(merges, line)) {
      if (line.rfind("#version", 0) == 0 || line.empty()) continue;
      const auto sp = line.find(' ');
      ranks_[{line.substr(0, sp), line.substr(sp + 1)}] = rank++;
    }
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      std::string s;
      if (cp < 0x80)
        s.push_back(static_cast<char>(cp));
      else {
        s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      }
      byte_sym_[b] = s;
    }
  }

  std::vector<TokenId> encode(const std::string& text) const {
    std::vector<TokenId> out;
    for (const auto& [b, e] : bpe::split_gpt2_regex(text)) {
      std::vector<std::string> word;
      for (std::size_t i = b; i < e; ++i)
        word.push_back(byte_sym_[static_cast<unsigned char>(text[i])]);
      while (word.size() > 1) {
        int best = std::numeric_limits<int>::max();
        std::pair<std::string, std::string> pair;
        for (std::size_t i = 0; i + 1 < word.size(); ++i) {
          auto it = ranks_.find({word[i], word[i + 1]});
          if (it != ranks_.end() && it->second < best) {
            best = it->second;
            pair = it->first;
          }
        }
        if (best == std::numeric_limits<int>::max()) break;
        std::vector<std::string> merged;
        for (std::size_t i = 0; i < word.size();) {
          if (i + 1 < word.size() && word[i] == pair.first && word[i + 1] == pair.second) {
            merged.push_back(pair.first + pair.second);
            i += 2;
          } else {
            merged.push_back(word[i++]);
          }
        }
        word = std::move(merged);
      }
      for (const auto& sym : word) out.push_back(ids_.at(sym));
    }
    return out;
  }

 private:
  std::map<std::string, TokenId> ids_;
  std::map<std::pair<std::string, std::string>, int> ranks_;
  std::string byte_sym_[256];
};

// Random text from pieces that exercise every branch of the GPT-2 pattern.
std::string random_text(std::mt19937& rng, int max_atoms) {
  static const std::vector<std::string> atoms = {
      "a",      "Z",          "hello",       " world", "é",
      "ß",      "Жук",        "中文",        "🦙",   "😶\u200d🌫️",
      "1",      "42",         "٣",           "Ⅻ",      "²",
      " ",      "  ",         "\t",          "\n",     "\r\n",
      "\u00a0", "\u2028",     "\u3000",      "\u0085", "\u000b",
      "\u000c", "'s",         "'t",          "'re",    "'ve",
      "'m",     "'ll",        "'d",          "'S",     "'",
      "''",     "!",          ".",           "-",      "...",
      "\u0301", "$",          "\x01",        "\u200b", "(",
      "\u05d0", "\U00020000", "\U0001F600",  " '",     " 1",
      " !",     "x'",         "\xef\xbf\xbd"};
  std::uniform_int_distribution<int> count(0, max_atoms);
  std::uniform_int_distribution<std::size_t> pick(0, atoms.size() - 1);
  std::string s;
  for (int n = count(rng); n > 0; --n) s += atoms[pick(rng)];
  return s;
}

// Random valid code points, half of them ASCII.
std::string random_code_points(std::mt19937& rng) {
  std::uniform_int_distribution<int> len(1, 24);
  std::uniform_int_distribution<std::uint32_t> ascii(0, 127), any(0x80, 0x10FFFF);
  std::bernoulli_distribution coin(0.5);
  std::string s;
  for (int n = len(rng); n > 0; --n) {
    std::uint32_t cp = coin(rng) ? ascii(rng) : any(rng);
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0x20;
    if (cp < 0x80)
      s.push_back(static_cast<char>(cp));
    else if (cp < 0x800) {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      s.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      s.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      s.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return s;
}

std::vector<bpe::Piece> fast_split(const std::string& text) {
  std::vector<bpe::Piece> out;
  bpe::split_gpt2(text, out);
  return out;
}

}  // namespace

TEST_CASE("bpe reproduces the GPT-2 vectors and decodes them byte for byte", "[bpe][vectors]") {
  auto tok = gpt2();
  std::size_t total = 0, matched = 0, round_trips = 0;
  for (const auto& v : read_jsonl(gpt2_dir() / "vectors.jsonl")) {
    const std::string text = v["text"];
    INFO(text);
    ++total;
    const Encoding e = tok->encode(text, false);
    CHECK(consistent(e));
    CHECK(e.ids == ids_of(v["ids"]));
    matched += e.ids == ids_of(v["ids"]);
    CHECK(tok->decode(e.ids, false) == text);
    round_trips += tok->decode(e.ids, false) == text;
    CHECK(tok->encode(text, true).ids == e.ids);  // GPT-2 adds nothing
    // Spans tile the text and each holds exactly the token's bytes.
    std::uint32_t at = 0;
    for (std::size_t k = 0; k < e.ids.size(); ++k) {
      CHECK(e.offsets[k].begin == at);
      at = e.offsets[k].end;
      CHECK(slice(text, e.offsets[k]) == tok->decode(std::vector<TokenId>{e.ids[k]}, false));
      CHECK(tok->id_to_piece(e.ids[k]) == e.pieces[k]);
    }
    CHECK(at == text.size());
  }
  WARN("gpt2/vectors.jsonl: " << matched << "/" << total << " matched, " << round_trips
                              << " decoded back exactly");
  CHECK(total == 46);
  CHECK(matched == total);
  CHECK(round_trips == total);
}

TEST_CASE("bpe: spans of a character split across tokens", "[bpe][offsets]") {
  // 🦙 (F0 9F A6 99) becomes " \xF0\x9F" + "\xA6" + "\x99": each token spans exactly its own
  // bytes, so spans may start or end inside a character.
  auto tok = gpt2();
  const std::string text = " this is 🦙.cpp";
  const Encoding e = tok->encode(text, false);
  REQUIRE(e.ids == std::vector<TokenId>{428, 318, 12520, 99, 247, 13, 20322});
  CHECK(e.offsets ==
        std::vector<ByteSpan>{{0, 5}, {5, 8}, {8, 11}, {11, 12}, {12, 13}, {13, 14}, {14, 17}});
  CHECK(e.pieces[2] == "ĠðŁ");
  CHECK(slice(text, e.offsets[2]) == " \xF0\x9F");
}

TEST_CASE("bpe: hand-written pre-tokenizer equals the ICU regex", "[bpe][pretokenizer]") {
  std::size_t texts = 0;
  for (const auto& t : vector_texts(gpt2_dir() / "vectors.jsonl")) {
    INFO(t);
    CHECK(fast_split(t) == bpe::split_gpt2_regex(t));
    ++texts;
  }
  std::mt19937 rng(20240601);
  for (int i = 0; i < 20000; ++i) {
    const std::string t = i % 2 ? random_text(rng, 30) : random_code_points(rng);
    const auto fast = fast_split(t);
    const auto regex = bpe::split_gpt2_regex(t);
    if (fast != regex) {
      FAIL_CHECK("pre-tokenizers differ on " << nlohmann::json(t).dump());
      break;
    }
    ++texts;
  }
  CHECK(texts == 46 + 20000);
}

TEST_CASE("bpe: merges equal a reference BPE on random text and long words", "[bpe]") {
  auto tok = gpt2();
  const ReferenceBpe reference;
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    const std::string t = random_text(rng, 40);
    INFO(nlohmann::json(t).dump());
    REQUIRE(tok->encode(t, false).ids == reference.encode(t));
  }
  // Long pieces take the heap-based path.
  std::uniform_int_distribution<int> letter(0, 25);
  for (std::size_t len : {65, 200, 3000}) {
    std::string word;
    for (std::size_t i = 0; i < len; ++i)
      word.push_back(static_cast<char>('a' + letter(rng) % (i % 3 ? 26 : 5)));
    INFO(len);
    CHECK(tok->encode(word, false).ids == reference.encode(word));
    CHECK(tok->encode(" " + word, false).ids == reference.encode(" " + word));
  }
  const std::string digits(500, '3');
  CHECK(tok->encode(digits, false).ids == reference.encode(digits));
}

TEST_CASE("bpe: concurrent encode from several threads", "[bpe][threads]") {
  std::mt19937 rng(99);
  std::vector<std::string> texts;
  for (int i = 0; i < 3000; ++i) texts.push_back(random_text(rng, 25) + random_code_points(rng));
  std::vector<std::vector<TokenId>> expected;
  {
    auto fresh = gpt2();
    for (const auto& t : texts) expected.push_back(fresh->encode(t, false).ids);
  }
  auto shared = gpt2();
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int th = 0; th < 4; ++th)
    threads.emplace_back([&, th] {
      for (int rep = 0; rep < 3; ++rep)
        for (std::size_t i = th; i < texts.size(); i += (rep == 0 ? 1 : 4))
          mismatches[th] += shared->encode(texts[i], false).ids != expected[i];
    });
  for (auto& t : threads) t.join();
  CHECK(mismatches == std::vector<int>(4, 0));
}

TEST_CASE("bpe: <|endoftext|> and add_bos", "[bpe]") {
  auto tok = gpt2();
  CHECK(tok->special_tokens().eos == 50256);
  Encoding e = tok->encode("a<|endoftext|>b", false);
  CHECK(e.ids == std::vector<TokenId>{64, 50256, 65});
  CHECK(e.offsets[1] == ByteSpan{1, 14});
  CHECK(tok->decode(e.ids, false) == "a<|endoftext|>b");
  CHECK(tok->decode(e.ids, true) == "ab");
  auto ordinary = gpt2({{"split_special", false}});
  e = ordinary->encode("a<|endoftext|>b", false);
  CHECK(std::find(e.ids.begin(), e.ids.end(), 50256) == e.ids.end());
  CHECK(ordinary->decode(e.ids, false) == "a<|endoftext|>b");
  auto bos = gpt2({{"add_bos", true}});
  e = bos->encode("Hello", true);
  CHECK(e.ids == std::vector<TokenId>{50256, 15496});
  CHECK(e.offsets[0] == ByteSpan{0, 0});
  CHECK(bos->encode("Hello", false).ids == std::vector<TokenId>{15496});
  CHECK(tok->piece_to_id("Ġthe") == 262);
  CHECK(tok->vocab_size() == 50257);
  CHECK_THROWS_AS(tok->decode(std::vector<TokenId>{50257}, false), RecordError);
}

TEST_CASE("bpe: broken vocabulary and merges files are ConfigErrors naming file and line",
          "[bpe][config]") {
  const auto dir = scratch_dir("bpe_config");
  const std::string vocab = (gpt2_dir() / "vocab.json").string();
  const std::string merges = read_file(gpt2_dir() / "merges.txt");
  auto expect_error = [&](const std::string& vocab_file, const std::string& merges_text,
                          const std::string& needle) {
    write_file(dir / "merges.txt", merges_text);
    try {
      tokenizer("bpe", {{"vocab", vocab_file}, {"merges", (dir / "merges.txt").string()}});
      FAIL("no ConfigError; expected one containing " << needle);
    } catch (const ConfigError& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(needle) != std::string::npos);
    }
  };
  const std::string header_and_first =
      merges.substr(0, merges.find('\n', merges.find('\n') + 1) + 1);
  const std::string m = (dir / "merges.txt").string();
  expect_error(vocab, header_and_first + "Ġt\n", m + ":3: expected a merge");
  expect_error(vocab, header_and_first + "a b c\n", m + ":3: expected a merge");
  expect_error(vocab, header_and_first + "\nh e\n", m + ":3:");
  expect_error(vocab, header_and_first + "☃☃ qq\n", m + ":3: the token '☃☃'");
  expect_error(vocab, header_and_first + header_and_first.substr(header_and_first.find('\n') + 1),
               m + ":3: the merge");
  expect_error(vocab, "#version: 0.2\n", "has no merges");
  write_file(dir / "vocab.json", "{\"a\": 0, \"b\": 0}");
  expect_error((dir / "vocab.json").string(), merges, "id 0 is given to both");
  write_file(dir / "vocab.json", "{\"a\": 0,");
  expect_error((dir / "vocab.json").string(), merges, "vocab.json: invalid JSON");
  write_file(dir / "vocab.json", "");
  expect_error((dir / "vocab.json").string(), merges, "vocab.json: invalid JSON");
  write_file(dir / "vocab.json", "{\"a\": 0}");
  expect_error((dir / "vocab.json").string(), merges, "lacks the token");
  expect_error((dir / "missing.json").string(), merges, "cannot read");
  CHECK_THROWS_AS(tokenizer("bpe", {}), ConfigError);
}

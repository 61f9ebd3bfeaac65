// The `vocab` tokenizer on aren-transliteration's character vocabularies.
#include <catch2/catch.hpp>

#include "masque/error.hpp"
#include "tok_test_util.hpp"

using namespace masque;
using namespace masque::test;

namespace {

std::filesystem::path aren() {
  return shared_dir() / "models" / "aren-transliteration";
}

std::unique_ptr<Tokenizer> source(const std::map<std::string, ParamValue>& extra = {}) {
  std::map<std::string, ParamValue> p = extra;
  p["vocab"] = (aren() / "source_vocab.txt").string();
  return tokenizer("vocab", p);
}

}  // namespace

TEST_CASE("vocab: ids are line numbers, unknown tokens are <unk>", "[vocab]") {
  auto tok = source();
  CHECK(tok->vocab_size() == 51);
  CHECK(tok->special_tokens().pad == 0);
  CHECK(tok->special_tokens().bos == 1);
  CHECK(tok->special_tokens().eos == 2);
  CHECK(tok->special_tokens().unk == 50);
  // Invisible format characters are tokens of their own (never trimmed).
  CHECK(tok->piece_to_id("\u200e") == 41);
  CHECK(tok->piece_to_id("\u200c") == 45);
  CHECK(tok->piece_to_id("\u202c") == 48);

  // The model's examples: every source token is known.
  for (const auto& ex : read_jsonl(aren() / "examples.jsonl")) {
    const auto tokens = ex["source_tokens"].get<std::vector<std::string>>();
    std::string text;
    for (const auto& t : tokens) text += (text.empty() ? "" : " ") + t;
    const Encoding e = tok->encode(text, false);
    CHECK(e.pieces == tokens);
    for (std::size_t k = 0; k < e.ids.size(); ++k) {
      CHECK(e.ids[k] != 50);
      CHECK(slice(text, e.offsets[k]) == tokens[k]);
      CHECK(tok->id_to_piece(e.ids[k]) == tokens[k]);
    }
    CHECK(tok->decode(e.ids, false) == text);
  }

  const std::string text = " \u0622 x  \u062a\u200e\t ";
  const Encoding e = tok->encode(text, false);
  // Only the space separates: "ت\u200e\t" is one (unknown) token.
  CHECK(e.ids == std::vector<TokenId>{*tok->piece_to_id("\u0622"), 50, 50});
  CHECK(e.offsets == std::vector<ByteSpan>{{1, 3}, {4, 5}, {7, 13}});

  auto target = tokenizer(
      "vocab",
      {{"vocab", (aren() / "target_vocab.txt").string()}, {"add_bos", true}, {"add_eos", true}});
  CHECK(target->special_tokens().unk == 42);
  const Encoding t = target->encode("s a m i r", true);
  CHECK(t.ids.front() == 1);
  CHECK(t.ids.back() == 2);
  CHECK(t.offsets.back() == ByteSpan{9, 9});
  CHECK(target->decode(t.ids, false) == "<s> s a m i r </s>");
  CHECK(target->decode(t.ids, true) == "s a m i r");
  CHECK(target->encode("s a m i r", false).ids.size() == 5);
  CHECK_THROWS_AS(target->decode(std::vector<TokenId>{43}, false), RecordError);
}

TEST_CASE("vocab: unk_token must be known unless empty", "[vocab][config]") {
  CHECK_THROWS_AS(source({{"unk_token", std::string("[UNK]")}}), ConfigError);
  auto strict = source({{"unk_token", std::string("")}});
  CHECK(strict->special_tokens().unk == -1);
  CHECK_THROWS_AS(strict->encode("x", false), RecordError);
  CHECK_THROWS_AS(source({{"bos_token", std::string("<bos>")}, {"add_bos", true}}), ConfigError);
}

TEST_CASE("one-token-per-line vocabularies with problems are ConfigErrors naming file and line",
          "[vocab][wordpiece][config]") {
  const auto dir = scratch_dir("vocab_files");
  auto expect = [&](const std::string& plugin, const std::string& content,
                    const std::string& needle) {
    const auto file = dir / "vocab.txt";
    write_file(file, content);
    try {
      std::map<std::string, ParamValue> p{{"vocab", file.string()}};
      tokenizer(plugin, p);
      FAIL(plugin << ": no ConfigError for " << nlohmann::json(content).dump());
    } catch (const ConfigError& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(needle) != std::string::npos);
    }
  };
  const std::string f = (dir / "vocab.txt").string();
  for (const std::string plugin : {"vocab", "wordpiece"}) {
    expect(plugin, "", f + ": the vocabulary file is empty");
    expect(plugin, "<unk>\n[UNK]\na\nb\na\n", f + ":5: duplicate token 'a' (already at line 3)");
    expect(plugin, "<unk>\n[UNK]\na\n\nb\n", f + ":4: empty line");
  }
  expect("wordpiece", "a\nb\n", "no [UNK]");
  expect("vocab", "a b\n<unk>\n", "contains a space");
  try {
    tokenizer("vocab", {{"vocab", (dir / "missing.txt").string()}});
    FAIL("no ConfigError for a missing file");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).find("missing.txt") != std::string::npos);
  }
  // A CRLF vocab.txt is read without its '\r' by wordpiece (like Hugging Face); `vocab` keeps
  // bytes exactly as they are.
  write_file(dir / "crlf.txt", "[UNK]\r\nhello\r\n");
  auto wp = tokenizer("wordpiece", {{"vocab", (dir / "crlf.txt").string()}});
  CHECK(wp->piece_to_id("hello") == 1);
}

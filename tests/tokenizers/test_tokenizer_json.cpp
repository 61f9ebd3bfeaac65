// The `tokenizer-json` plugin against the vectors of Hugging Face tokenizers 0.22 (Rust) in
// ../shared/tokenizers-json: every encode vector (with and without special tokens) and every
// decode vector of the six real files, offsets that stay inside the text (and tile it for
// byte-level BPE), and broken files that must be clear errors naming the file and JSON path.
#include <catch2/catch.hpp>

#include <random>
#include <sstream>
#include <thread>

#include "masque/error.hpp"
#include "pretokenizer.hpp"
#include "regex.hpp"
#include "tok_test_util.hpp"
#include "tokenizer_files.hpp"

using namespace masque;
using namespace masque::test;

namespace {

const char* const kFolders[] = {"llama3", "qwen3",      "deepseek-v3",
                                "gemma3", "phi-3-mini", "t5-small"};

std::filesystem::path json_dir(const std::string& name) {
  return shared_dir() / "tokenizers-json" / name;
}

// One tokenizer per folder, loaded once (gemma3's file is 33 MB).
const Tokenizer& hf(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  auto& t = loaded[name];
  if (!t) t = tokenizer("tokenizer-json", {{"path", json_dir(name).string()}});
  return *t;
}

std::string error_of(const std::map<std::string, ParamValue>& params) {
  try {
    (void)tokenizer("tokenizer-json", params);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// Writes `text` as tokenizer.json into a fresh folder and returns the loader's error.
std::string error_for_file(const std::string& name, const std::string& text) {
  const auto dir = scratch_dir("tokenizer-json-" + name);
  write_file(dir / "tokenizer.json", text);
  return error_of({{"path", dir.string()}});
}

// A small valid tokenizer.json (a byte-level BPE) to break in one place at a time.
nlohmann::json small_bpe() {
  return nlohmann::json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
    "post_processor": null,
    "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "fuse_unk": false,
              "byte_fallback": false, "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}})");
}

}  // namespace

TEST_CASE("tokenizer-json: every encode vector of the six files", "[tokenizer-json]") {
  for (const char* name : kFolders) {
    INFO(name);
    const Tokenizer& tok = hf(name);
    const auto vectors = read_jsonl(json_dir(name) / "vectors.jsonl");
    REQUIRE(vectors.size() == 70);
    std::size_t exact = 0;
    for (const auto& v : vectors) {
      const std::string text = v["text"];
      const bool add_special = v.value("add_special_tokens", false);
      INFO(text << (add_special ? " (add_special)" : ""));
      const Encoding e = tok.encode(text, add_special);
      CHECK(e.ids == ids_of(v["ids"]));
      exact += e.ids == ids_of(v["ids"]);
      CHECK(consistent(e));
      CHECK(spans_in_bounds(e, text.size()));
      for (std::size_t k = 0; k < e.ids.size(); ++k)
        CHECK(e.pieces[k] == tok.id_to_piece(e.ids[k]));
    }
    CHECK(exact == vectors.size());
  }
}

TEST_CASE("tokenizer-json: every decode vector of the six files", "[tokenizer-json]") {
  for (const char* name : kFolders) {
    INFO(name);
    const Tokenizer& tok = hf(name);
    const auto vectors = read_jsonl(json_dir(name) / "decode.jsonl");
    REQUIRE(vectors.size() == 10);
    for (const auto& v : vectors) {
      INFO(v.dump());
      CHECK(tok.decode(ids_of(v["ids"]), v["skip_special_tokens"].get<bool>()) ==
            v["text"].get<std::string>());
    }
  }
}

TEST_CASE("tokenizer-json: byte-level offsets tile the text and decode each token",
          "[tokenizer-json]") {
  // llama3 and deepseek-v3: no normalizer and no offset trimming on the post-processor side
  // that would change spans (llama3's ByteLevel processor has trim_offsets false).
  for (const char* name : {"llama3", "deepseek-v3"}) {
    INFO(name);
    const Tokenizer& tok = hf(name);
    for (const auto& v : read_jsonl(json_dir(name) / "vectors.jsonl")) {
      const std::string text = v["text"];
      INFO(text);
      const Encoding e = tok.encode(text, false);
      std::string joined;
      std::uint32_t at = 0;
      for (const ByteSpan& s : e.offsets) {
        CHECK(s.begin == at);
        joined += slice(text, s);
        at = s.end;
      }
      CHECK(joined == text);
    }
  }
  // A SentencePiece-style file: "▁Hello" spans "Hello" or " Hello", never outside the text.
  const Encoding e = hf("phi-3-mini").encode("Hello world", false);
  REQUIRE(e.pieces.size() == 2);
  CHECK(e.pieces[0] == "\xE2\x96\x81Hello");
  CHECK(slice("Hello world", e.offsets[0]) == "Hello");
  CHECK(slice("Hello world", e.offsets[1]) == " world");
}

TEST_CASE("tokenizer-json: special tokens, pairs and special-token ids", "[tokenizer-json]") {
  const Tokenizer& gemma = hf("gemma3");
  const Encoding e = gemma.encode("Hi", true);
  REQUIRE(!e.ids.empty());
  CHECK(e.ids[0] == 2);  // <bos> from the TemplateProcessing post-processor
  CHECK(e.offsets[0] == ByteSpan{0, 0});
  CHECK(gemma.special_tokens().bos == 2);
  CHECK(gemma.is_special(2));
  const Encoding pair = gemma.encode_pair("Hi", "there", true);
  // <bos> A <bos> B, type ids 0 .. 0 1 .. 1
  CHECK(pair.ids.front() == 2);
  CHECK(pair.type_ids.back() == 1);
  CHECK(std::count(pair.ids.begin(), pair.ids.end(), 2) == 2);

  const Tokenizer& t5 = hf("t5-small");
  const Encoding s = t5.encode("Hello", true);
  CHECK(s.ids.back() == 1);  // </s>
  CHECK(s.offsets.back() == ByteSpan{5, 5});
  CHECK(t5.special_tokens().eos == 1);
  CHECK(t5.special_tokens().unk == 2);
}

TEST_CASE("tokenizer-json: invalid UTF-8 and unknown ids are record errors", "[tokenizer-json]") {
  const Tokenizer& tok = hf("qwen3");
  CHECK_THROWS_AS(tok.encode("ok \xff", false), RecordError);
  const std::vector<TokenId> bad = {1, -1};
  CHECK_THROWS_AS(tok.decode(bad, false), RecordError);
  const std::vector<TokenId> beyond = {tok.vocab_size()};
  CHECK_THROWS_AS(tok.decode(beyond, false), RecordError);
}

TEST_CASE("tokenizer-json: the same ids from several threads at once", "[tokenizer-json]") {
  const Tokenizer& tok = hf("qwen3");
  const auto vectors = read_jsonl(json_dir("qwen3") / "vectors.jsonl");
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round)
        for (const auto& v : vectors)
          wrong[t] +=
              tok.encode(v["text"].get<std::string>(), v.value("add_special_tokens", false)).ids !=
              ids_of(v["ids"]);
    });
  for (auto& th : threads) th.join();
  CHECK(wrong == std::vector<int>(4, 0));
}

TEST_CASE("tokenizer-json: broken files are configuration errors naming file and JSON path",
          "[tokenizer-json]") {
  SECTION("missing folder file") {
    const auto dir = scratch_dir("tokenizer-json-empty");
    CHECK_THAT(error_of({{"path", dir.string()}}), Catch::Contains("has no tokenizer.json"));
  }
  SECTION("truncated") {
    const std::string full = small_bpe().dump();
    const std::string err = error_for_file("truncated", full.substr(0, full.size() / 2));
    CHECK_THAT(err, Catch::Contains("tokenizer.json: invalid JSON at byte"));
    CHECK_THAT(err, Catch::Contains("truncated"));
    CHECK_THAT(err, Catch::Contains("$."));
  }
  SECTION("malformed") {
    std::string text = small_bpe().dump();
    text.replace(text.find("\"merges\""), 8, "\"merges\" 1");
    const std::string err = error_for_file("malformed", text);
    CHECK_THAT(err, Catch::Contains("invalid JSON at byte"));
    CHECK_THAT(err, Catch::Contains("$.model"));
  }
  SECTION("the JSON path of an error inside nested arrays") {
    std::string text = small_bpe().dump();
    const std::string added = R"("added_tokens":[])";
    text.replace(text.find(added), added.size(), R"("added_tokens":[1,[2,[3,x]]])");
    CHECK_THAT(error_for_file("nested", text), Catch::Contains("(in $.added_tokens[1][1][1])"));
  }
  SECTION("not an object") {
    CHECK_THAT(error_for_file("array", "[1, 2]"), Catch::Contains("$: expected a JSON object"));
  }
  SECTION("unknown component types") {
    auto j = small_bpe();
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers", {{{"type", "Whitespace"}}, {{"type", "Mystery"}}}}};
    const std::string err = error_for_file("unknown-pre", j.dump());
    CHECK_THAT(err, Catch::Contains("tokenizer.json: $.pre_tokenizer.pretokenizers[1].type"));
    CHECK_THAT(err, Catch::Contains("unknown pre-tokenizer type 'Mystery'"));
    for (const char* part : {"normalizer", "post_processor", "decoder"}) {
      auto k = small_bpe();
      k[part] = {{"type", "Bogus"}};
      const std::string e2 = error_for_file(std::string("unknown-") + part, k.dump());
      CHECK_THAT(e2, Catch::Contains(std::string("$.") + part + ".type"));
      CHECK_THAT(e2, Catch::Contains("'Bogus'"));
    }
    auto m = small_bpe();
    m["model"]["type"] = "Quantum";
    CHECK_THAT(error_for_file("unknown-model", m.dump()),
               Catch::Contains("$.model.type: unknown model type 'Quantum'"));
  }
  SECTION("a merge naming a token not in the vocabulary") {
    auto j = small_bpe();
    j["model"]["merges"] = {"a b", "b c"};
    CHECK_THAT(error_for_file("bad-merge", j.dump()),
               Catch::Contains("tokenizer.json: $.model.merges[1]: the token 'c' is not in the "
                               "vocabulary"));
    j["model"]["merges"] = nlohmann::json::array({nlohmann::json::array({"b", "a"})});
    CHECK_THAT(
        error_for_file("bad-merged", j.dump()),
        Catch::Contains("$.model.merges[0]: the merged token 'ba' is not in the vocabulary"));
  }
  SECTION("wrong types and values") {
    auto j = small_bpe();
    j["model"]["vocab"]["a"] = "zero";
    CHECK_THAT(error_for_file("vocab-type", j.dump()), Catch::Contains("$.model.vocab"));
    auto k = small_bpe();
    k["pre_tokenizer"] = {
        {"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
    CHECK_THAT(error_for_file("bad-regex", k.dump()),
               Catch::Contains("$.pre_tokenizer.pattern.Regex: the regex does not compile"));
    auto l = small_bpe();
    l["added_tokens"] = {{{"id", 3}, {"content", 5}}};
    CHECK_THAT(error_for_file("added-type", l.dump()),
               Catch::Contains("$.added_tokens[0].content: expected a string"));
    auto m = small_bpe();
    m["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", "!!!"}};
    CHECK_THAT(error_for_file("charsmap", m.dump()),
               Catch::Contains("$.normalizer.precompiled_charsmap: not base64"));
  }
  SECTION("a Metaspace replacement that is not one character") {
    for (const char* replacement : {"", "ab"}) {
      auto j = small_bpe();
      j["pre_tokenizer"] = {{"type", "Metaspace"},
                            {"replacement", replacement},
                            {"prepend_scheme", "always"},
                            {"split", true}};
      CHECK_THAT(error_for_file("metaspace", j.dump()),
                 Catch::Contains("$.pre_tokenizer.replacement: expected a single character"));
    }
  }
  SECTION("a special token the post-processor adds outside the vocabulary") {
    auto j = small_bpe();
    j["post_processor"] = nlohmann::json::parse(R"({"type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [999], "tokens": ["<s>"]}}})");
    CHECK_THAT(error_for_file("special-id", j.dump()),
               Catch::Contains("$.post_processor: special token id 999 is outside the vocabulary"));
  }
  SECTION("the small file itself loads and merges") {
    const auto dir = scratch_dir("tokenizer-json-small");
    write_file(dir / "tokenizer.json", small_bpe().dump());
    auto tok = tokenizer("tokenizer-json", {{"path", (dir / "tokenizer.json").string()}});
    CHECK(tok->encode("abba", false).ids == std::vector<TokenId>{2, 1, 0});
    CHECK(tok->decode(std::vector<TokenId>{2, 1, 0}, false) == "abba");
  }
}

TEST_CASE("tokenizer files: which plugin reads a model folder", "[tokenizer-json]") {
  // As the built tokenizer plugins declare their files.
  const Registry& registry = build_registry();
  const auto dir = scratch_dir("tokenizer-pick");
  CHECK(!tok::pick_tokenizer(registry, dir));
  write_file(dir / "vocab.txt", "[UNK]\n");
  CHECK(tok::pick_tokenizer(registry, dir)->plugin == "wordpiece");
  write_file(dir / "vocab.json", "{}");
  CHECK(tok::pick_tokenizer(registry, dir)->plugin == "wordpiece");  // vocab.json alone is not BPE
  write_file(dir / "merges.txt", "#version: 0.2\n");
  CHECK(tok::pick_tokenizer(registry, dir)->plugin == "bpe");
  write_file(dir / "tokenizer.model", "x");
  CHECK(tok::pick_tokenizer(registry, dir)->plugin == "sentencepiece");
  write_file(dir / "tokenizer.json", "{}");
  CHECK(tok::pick_tokenizer(registry, dir)->plugin == "tokenizer-json");
  CHECK(tok::pick_tokenizer(registry, shared_dir() / "models/stories260k")->plugin ==
        "sentencepiece");
  CHECK(tok::pick_tokenizer(registry, json_dir("gemma3"))->plugin == "tokenizer-json");
}

TEST_CASE("tokenizer-json: the Llama 3 / Qwen2 scanner cuts text as the regex does in ICU",
          "[tokenizer-json]") {
  // Oniguruma's reading of the patterns, through ICU (regex.cpp's translation) is the
  // reference; the scanner must give the same pieces on real and on adversarial text.
  const hfjson::Regex llama3(bpe::kLlama3Pattern), qwen2(bpe::kQwen2Pattern);
  std::vector<std::string> texts;
  {
    std::istringstream lines(read_file(source_dir() / "tests/tokenizers/data/multilingual.txt"));
    for (std::string line; std::getline(lines, line);) texts.push_back(line);
  }
  for (const char* name : kFolders)
    for (const auto& v : read_jsonl(json_dir(name) / "vectors.jsonl")) texts.push_back(v["text"]);
  // Random strings over the characters where the alternatives differ.
  const std::vector<std::string> alphabet = {"'",
                                             "s",
                                             "S",
                                             "t",
                                             "re",
                                             "VE",
                                             "ll",
                                             "D",
                                             "m",
                                             "\xC5\xBF",
                                             "a",
                                             "Z",
                                             "\xC3\xA9",
                                             "1",
                                             "23",
                                             "\xD9\xA3",
                                             "\xC2\xBD",
                                             " ",
                                             "  ",
                                             "\t",
                                             "\n",
                                             "\r",
                                             "\r\n",
                                             "\xC2\xA0",
                                             "\xC2\x85",
                                             "\x0B",
                                             "\xE3\x80\x80",
                                             ".",
                                             ",",
                                             "!?",
                                             "-",
                                             "\xF0\x9F\x98\x81",
                                             "\xE5\x8C\x97",
                                             "\xCC\x81",
                                             "_"};
  std::mt19937 rng(21);
  for (int k = 0; k < 3000; ++k) {
    std::string t;
    const int len = static_cast<int>(rng() % 12);
    for (int c = 0; c < len; ++c) t += alphabet[rng() % alphabet.size()];
    texts.push_back(t);
  }
  for (const std::string& text : texts) {
    INFO(hex_bytes(text));
    for (int digits : {3, 1}) {
      std::vector<hfjson::Span> want, got;
      (digits == 3 ? llama3 : qwen2).find_all(text, want);
      bpe::split_llama3(text, digits, got);
      CHECK(got == want);
    }
  }
}

TEST_CASE("tokenizer-json: components beyond the six files match Hugging Face tokenizers",
          "[tokenizer-json]") {
  // data/tokenizer_json_components.jsonl: ids and decodes from Hugging Face tokenizers 0.22
  // (Rust, bench/tokenizers/component_vectors.mjs) for the small files of the fuzz seed corpus.
  std::map<std::string, std::unique_ptr<Tokenizer>> tokenizers;
  std::size_t count = 0;
  for (const auto& v :
       read_jsonl(source_dir() / "tests/tokenizers/data/tokenizer_json_components.jsonl")) {
    const std::string name = v["file"];
    auto& tok = tokenizers[name];
    if (!tok)
      tok = tokenizer(
          "tokenizer-json",
          {{"path",
            (source_dir() / "tests/fuzz/corpus/tokenizer_json" / (name + ".json")).string()}});
    const std::string text = v["text"];
    INFO(name << ": " << text << (v["add_special_tokens"].get<bool>() ? " (add_special)" : ""));
    const Encoding e = tok->encode(text, v["add_special_tokens"].get<bool>());
    CHECK(e.ids == ids_of(v["ids"]));
    CHECK(spans_in_bounds(e, text.size()));
    CHECK(tok->decode(ids_of(v["ids"]), false) == v["decoded"].get<std::string>());
    CHECK(tok->decode(ids_of(v["ids"]), true) == v["decoded_skip"].get<std::string>());
    ++count;
  }
  CHECK(count == 160);
}

TEST_CASE("tokenizer-json: Unigram ties between equal-score segmentations break as in Rust",
          "[tokenizer-json]") {
  // data/unigram_ties.jsonl: Hugging Face tokenizers' ids for t5-small on runs of one character
  // (bench/tokenizers/unigram_tie_vectors.mjs). "-" + "---" and "---" + "-" score the same but
  // for the last bits of the scores as serde_json parses them; 16 hyphens are "---","---","-",...
  std::size_t count = 0, differ = 0;
  for (const auto& v : read_jsonl(source_dir() / "tests/tokenizers/data/unigram_ties.jsonl")) {
    const std::string text = v["text"];
    const Encoding e = hf("t5-small").encode(text, false);
    INFO(text);
    CHECK(e.ids == ids_of(v["ids"]));
    differ += e.ids != ids_of(v["ids"]);
    ++count;
  }
  CHECK(count == 532);
  CHECK(differ == 0);
}

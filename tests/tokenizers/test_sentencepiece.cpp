// The `sentencepiece` tokenizer on stories260k's tokenizer.model: the reference vectors, and
// agreement with Debian's spm_encode on a multilingual corpus.
#include <catch2/catch.hpp>

#include <cstdio>
#include <sstream>

#include "masque/error.hpp"
#include "tok_test_util.hpp"

using namespace masque;
using namespace masque::test;

namespace {

std::filesystem::path model_dir() {
  return shared_dir() / "models" / "stories260k";
}

std::unique_ptr<Tokenizer> stories(const std::map<std::string, ParamValue>& extra = {}) {
  std::map<std::string, ParamValue> p = extra;
  if (!p.count("model")) p["path"] = model_dir().string();
  return tokenizer("sentencepiece", p);
}

const std::string kSpace = "\u2581";  // ▁

// The input bytes at a piece's span, spelled as SentencePiece spells pieces: a run of spaces is
// one ▁ (remove_extra_whitespaces).
std::string spelled(const std::string& surface) {
  std::string out;
  for (std::size_t i = 0; i < surface.size(); ++i) {
    if (surface[i] == ' ') {
      if (i == 0 || surface[i - 1] != ' ') out += kSpace;
    } else {
      out += surface[i];
    }
  }
  return out;
}

int byte_piece_value(const std::string& piece) {
  if (piece.size() != 6 || piece.rfind("<0x", 0) != 0) return -1;
  return std::stoi(piece.substr(3, 2), nullptr, 16);
}

// Offsets check: byte pieces span their own byte; other pieces span the text they spell (a
// leading ▁ may stand for the dummy prefix, which has no input byte).
void check_spans(const std::string& text, const Encoding& e) {
  for (std::size_t k = 0; k < e.ids.size(); ++k) {
    const std::string surface = slice(text, e.offsets[k]);
    INFO("piece " << k << " '" << e.pieces[k] << "' span [" << e.offsets[k].begin << ", "
                  << e.offsets[k].end << ")");
    if (const int b = byte_piece_value(e.pieces[k]); b >= 0) {
      REQUIRE(surface.size() == 1);
      CHECK(static_cast<unsigned char>(surface[0]) == b);
    } else {
      const std::string s = spelled(surface);
      CHECK((e.pieces[k] == s || e.pieces[k] == kSpace + s));
    }
  }
}

std::vector<std::vector<TokenId>> spm_encode(const std::filesystem::path& model,
                                             const std::filesystem::path& input) {
  const std::string cmd =
      "spm_encode --model='" + model.string() + "' --output_format=id < '" + input.string() + "'";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) throw std::runtime_error("cannot run " + cmd);
  std::string out;
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  const int status = pclose(pipe);
  if (status != 0) throw std::runtime_error(cmd + " failed with status " + std::to_string(status));
  std::vector<std::vector<TokenId>> lines;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ids(line);
    std::vector<TokenId> v;
    TokenId id;
    while (ids >> id) v.push_back(id);
    lines.push_back(v);
  }
  return lines;
}

}  // namespace

TEST_CASE("sentencepiece reproduces the stories260k vectors", "[sentencepiece][vectors]") {
  auto tok = stories();
  std::size_t total = 0, matched = 0;
  for (const auto& v : read_jsonl(tokenizers_dir() / "stories260k" / "vectors.jsonl")) {
    const std::string text = v["text"];
    INFO(text);
    ++total;
    const Encoding e = tok->encode(text, false);
    CHECK(consistent(e));
    CHECK(spans_in_bounds(e, text.size()));
    const auto ids = ids_of(v["ids"]);
    const auto pieces = v["pieces"].get<std::vector<std::string>>();
    CHECK(e.ids == ids);
    CHECK(e.pieces == pieces);
    matched += e.ids == ids && e.pieces == pieces;
    check_spans(text, e);
    // Model input: BOS + ids (tokenizer_config.json: add_bos_token true, add_eos_token false).
    std::vector<TokenId> with_bos = {1};
    with_bos.insert(with_bos.end(), ids.begin(), ids.end());
    const Encoding s = tok->encode(text, true);
    CHECK(s.ids == with_bos);
    CHECK(s.offsets.front() == ByteSpan{0, 0});
  }
  WARN("stories260k/vectors.jsonl: " << matched << "/" << total << " matched (ids and pieces)");
  CHECK(total == 46);
  CHECK(matched == total);
}

TEST_CASE("sentencepiece agrees with spm_encode on a multilingual corpus",
          "[sentencepiece][spm_encode]") {
  const auto corpus = source_dir() / "tests" / "tokenizers" / "data" / "multilingual.txt";
  const auto model = model_dir() / "tokenizer.model";
  const auto expected = spm_encode(model, corpus);
  auto tok = stories();
  std::istringstream in(read_file(corpus));
  std::string line;
  std::size_t n = 0, matched = 0;
  while (std::getline(in, line)) {
    REQUIRE(n < expected.size());
    INFO("line " << n + 1 << ": " << line);
    const Encoding e = tok->encode(line, false);
    CHECK(e.ids == expected[n]);
    matched += e.ids == expected[n];
    check_spans(line, e);
    ++n;
  }
  CHECK(n == expected.size());
  CHECK(n >= 300);
  WARN("spm_encode agreement on tests/tokenizers/data/multilingual.txt: " << matched << "/" << n
                                                                          << " lines");
  CHECK(matched == n);
}

TEST_CASE("sentencepiece: BOS/EOS configuration and decode", "[sentencepiece]") {
  const std::string model = (model_dir() / "tokenizer.model").string();
  const std::string text = "Once upon a time, there was a little girl named Lily.";
  const std::vector<TokenId> ids = {403, 407, 261, 378, 432, 383, 286, 261,
                                    376, 298, 315, 421, 395, 317, 426};
  // `model` alone: tokenizer_config.json next to it is used.
  auto tok = stories({{"model", model}});
  CHECK(tok->encode(text, false).ids == ids);
  std::vector<TokenId> with_bos = {1};
  with_bos.insert(with_bos.end(), ids.begin(), ids.end());
  CHECK(tok->encode(text, true).ids == with_bos);
  // A folder without tokenizer_config.json: BOS only.
  const auto dir = scratch_dir("sentencepiece_config");
  auto plain = tokenizer("sentencepiece", {{"path", dir.string()}, {"model", model}});
  CHECK(plain->encode(text, true).ids == with_bos);
  // The config says so.
  write_file(dir / "tokenizer_config.json", R"({"add_bos_token": false, "add_eos_token": true})");
  auto eos_only = tokenizer("sentencepiece", {{"path", dir.string()}, {"model", model}});
  Encoding e = eos_only->encode(text, true);
  CHECK(e.ids.front() == 403);
  CHECK(e.ids.back() == 2);
  CHECK(e.offsets.back() ==
        ByteSpan{static_cast<std::uint32_t>(text.size()), static_cast<std::uint32_t>(text.size())});
  // A flag of another type is an error naming the file and key, not the default.
  write_file(dir / "tokenizer_config.json", R"({"add_bos_token": "yes"})");
  CHECK_THROWS_WITH(
      tokenizer("sentencepiece", {{"path", dir.string()}, {"model", model}}),
      Catch::Contains("tokenizer_config.json: add_bos_token: expected true or false"));
  write_file(dir / "tokenizer_config.json", R"({"add_bos_token": null})");
  CHECK(tokenizer("sentencepiece", {{"path", dir.string()}, {"model", model}})
            ->encode(text, true)
            .ids == with_bos);
  // Explicit parameters win.
  auto both = stories({{"add_bos", std::string("true")}, {"add_eos", std::string("true")}});
  e = both->encode(text, true);
  CHECK(e.ids.front() == 1);
  CHECK(e.ids.back() == 2);
  CHECK(both->decode(e.ids, true) == text);
  CHECK(tok->decode(tok->encode("Führer ½ 中 \t x", false).ids, false) == "Führer ½ 中 \t x");
  CHECK(tok->special_tokens().bos == 1);
  CHECK(tok->special_tokens().eos == 2);
  CHECK(tok->special_tokens().unk == 0);
  CHECK(tok->is_special(1));
  CHECK_FALSE(tok->is_special(13));
  CHECK(tok->id_to_piece(13) == "<0x0A>");
  CHECK(tok->piece_to_id("▁Once") == 403);
  CHECK_FALSE(tok->piece_to_id("no such piece").has_value());
  CHECK(tok->vocab_size() == 512);
  CHECK_THROWS_AS(tok->decode(std::vector<TokenId>{512}, false), RecordError);

  write_file(dir / "bad.model", "this is not a model");
  CHECK_THROWS_AS(tokenizer("sentencepiece", {{"model", (dir / "bad.model").string()}}),
                  ConfigError);
  CHECK_THROWS_AS(tokenizer("sentencepiece", {{"path", dir.string()}}),
                  ConfigError);  // no tokenizer.model
}

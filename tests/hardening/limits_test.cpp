// Resource limits: record bytes and tokens, generated tokens, and memory and time for huge lines
// and huge vocabularies. Each limit fails only the record concerned, with a message that names
// the limit, or refuses the file with its name and line.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <functional>

#include "hardening_support.hpp"
#include "masque/error.hpp"
#include "test_support.hpp"
#include "tokenizer_loader.hpp"

using namespace masque;
using namespace masque::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// MASQUE_TEST_SCALE < 1 shrinks the largest inputs (the sanitizer run sets 0.3): the limits are
// the same, only the million-entry vocabularies have fewer entries.
double test_scale() {
  const char* s = std::getenv("MASQUE_TEST_SCALE");
  const double v = s ? std::atof(s) : 1.0;
  return v > 0 && v <= 1 ? v : 1.0;
}

std::string words(std::size_t n) {
  std::string text;
  for (std::size_t i = 0; i < n; ++i) text += i ? " cat" : "cat";
  return text;
}

}  // namespace

TEST_CASE("limits: a 100 MB line is discarded while read, memory stays near the record limit",
          "[hardening][limits]") {
  const fs::path dir = scratch_dir("huge_line");
  write_file(dir / "small.txt", "Once upon a time.\nThe end.\n");
  {
    std::ofstream f(dir / "huge.txt", std::ios::binary);
    const std::string mib(1 << 20, 'a');
    f << "Once upon a time.\n";
    for (int i = 0; i < 100; ++i) f << mib;
    f << "\nThe end.\n";
  }
  const std::vector<std::string> args = {"run", ready_pipeline("lm-score.yaml"), "-q"};
  const Measured base = run_measured(args, dir / "small.txt", dir);
  const Measured huge = run_measured(args, dir / "huge.txt", dir);
  REQUIRE(base.exit_code == 0);
  CHECK(huge.exit_code == 1);
  const auto out = parse_jsonl(huge.out);
  REQUIRE(out.size() == 3);
  CHECK_FALSE(out[0].contains("error"));
  CHECK_THAT(
      out[1]["error"].get<std::string>(),
      Contains("104857601 bytes, longer than the limit of 16777216 (task.max_record_bytes)"));
  CHECK(out[2]["nll"] == parse_jsonl(base.out)[1]["nll"]);
  // The 16 MiB kept at most (a string that doubles up to it) and no more: far below the line.
  INFO("peak RSS " << base.peak_rss_kb << " kB for a short input, " << huge.peak_rss_kb
                   << " kB with the 100 MB line");
  CHECK(huge.peak_rss_kb - base.peak_rss_kb < 64 * 1024);
}

TEST_CASE("limits: task.max_record_bytes is settable and counts the line's bytes",
          "[hardening][limits]") {
  auto r = run_masque(
      {"run", ready_pipeline("lm-score.yaml"), "-q", "--set", "task.max_record_bytes=10"},
      "0123456789\n0123456789A\n");
  CHECK(r.exit_code == 1);
  const auto out = parse_jsonl(r.out);
  REQUIRE(out.size() == 2);
  CHECK_FALSE(out[0].contains("error"));
  CHECK(out[1]["error"] ==
        "the record is 12 bytes, longer than the limit of 10 (task.max_record_bytes)");
}

TEST_CASE("limits: task.max_record_tokens fails longer records, the model's maximum caps it",
          "[hardening][limits]") {
  auto r = run_masque(
      {"run", ready_pipeline("lm-score.yaml"), "-q", "--set", "task.max_record_tokens=10"},
      words(3) + "\n" + words(5) + "\n");
  CHECK(r.exit_code == 1);
  auto out = parse_jsonl(r.out);
  REQUIRE(out.size() == 2);
  CHECK_FALSE(out[0].contains("error"));
  CHECK_THAT(out[1]["error"].get<std::string>(),
             Contains("the record has 11 tokens, more than max_record_tokens (10)"));

  // A limit above what the model can take is the model's (stories260k: 512 positions).
  r = run_masque(
      {"run", ready_pipeline("lm-score.yaml"), "-q", "--set", "task.max_record_tokens=100000"},
      words(600) + "\n" + words(100) + "\n");
  out = parse_jsonl(r.out);
  REQUIRE(out.size() == 2);
  CHECK_THAT(out[0]["error"].get<std::string>(),
             Contains("more than the model's maximum positions (512)"));
  CHECK_FALSE(out[1].contains("error"));
}

TEST_CASE("limits: generation stops at max_new_tokens and at the end of the model's context",
          "[hardening][limits]") {
  auto r = run_masque(
      {"run", ready_pipeline("lm-generate.yaml"), "-q", "--set", "decoder.max_new_tokens=3"},
      "Once upon a time\n");
  REQUIRE(r.exit_code == 0);
  CHECK(parse_jsonl(r.out).at(0)["tokens"].size() == 3);

  // stories260k has 512 positions: a prompt of n ids leaves room for 512 - n new tokens, even
  // with max_new_tokens 256; a prompt that fills the context generates nothing, a longer one
  // is a record error.
  std::string prompts;
  for (int n : {506, 511, 512, 513}) {
    prompts += "1";
    for (int i = 1; i < n; ++i) prompts += " 300";
    prompts += "\n";
  }
  r = run_masque({"run", ready_pipeline("lm-generate.yaml"), "-q", "--input-format", "ids"},
                 prompts);
  CHECK(r.exit_code == 1);
  const auto out = parse_jsonl(r.out);
  REQUIRE(out.size() == 4);
  CHECK(out[0]["tokens"].size() <= 6);
  CHECK(out[1]["tokens"].size() <= 1);
  CHECK(out[2]["tokens"].empty());
  CHECK_FALSE(out[2].contains("error"));
  CHECK_THAT(out[3]["error"].get<std::string>(),
             Contains("513 tokens, more than the model's maximum positions (512)"));

  // An end token the model cannot produce would index past its logits: a configuration error
  // before any record.
  r = run_masque({"run", ready_pipeline("lm-generate.yaml"), "-q", "--set",
                  "decoder.end_tokens=[600]", "--set", "decoder.min_new_tokens=2"},
                 "Once upon a time\nThe end\n");
  CHECK(r.exit_code == 2);
  CHECK(r.out.empty());
  CHECK_THAT(r.err, Contains("end_tokens: id 600 is outside the vocabulary (size 512)"));
}

namespace {

// GPT-2's byte-to-unicode alphabet: the 256 one-character tokens every byte-level vocab.json has.
std::vector<std::string> byte_tokens() {
  std::vector<std::string> out;
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const int cp = printable ? b : next++;
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    out.push_back(s);
  }
  return out;
}

std::string entry(std::size_t i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "w%07zu", i);
  return buf;
}

// vocab.txt ([UNK] then `n` entries) and vocab.json + merges.txt (the byte tokens, "ab", then
// the same `n` entries) in `dir`.
void write_vocabularies(const fs::path& dir, std::size_t n) {
  fs::create_directories(dir);
  write_lines(dir / "vocab.txt", n + 1, [](std::size_t i) { return i ? entry(i - 1) : "[UNK]"; });
  std::ofstream json(dir / "vocab.json", std::ios::binary);
  json << "{";
  std::size_t id = 0;
  auto add = [&](const std::string& token) {
    json << (id ? ", " : "") << nlohmann::json(token).dump() << ": " << id;
    ++id;
  };
  for (const std::string& t : byte_tokens()) add(t);
  add("ab");
  for (std::size_t i = 0; i < n; ++i) add(entry(i));
  json << "}";
  write_file(dir / "merges.txt", "#version: 0.2\na b\n");
}

struct Load {
  long rss_kb;
  double seconds;
};

// `masque tokenize --no-special ARGS` in `dir` (so relative --set paths are its files) on one
// line; checks the ids.
Load tokenize(const std::vector<std::string>& args, const fs::path& dir, const std::string& line,
              const nlohmann::json& ids) {
  write_file(dir / "in.txt", line + "\n");
  std::vector<std::string> all = {"tokenize", "-q", "--no-special"};
  all.insert(all.end(), args.begin(), args.end());
  const Measured m = run_measured(all, dir / "in.txt", dir, {}, dir);
  INFO(m.err);
  REQUIRE(m.exit_code == 0);
  CHECK(parse_jsonl(m.out).at(0)["ids"] == ids);
  return {m.peak_rss_kb, m.seconds};
}

}  // namespace

TEST_CASE("limits: a vocabulary of a million entries loads in linear time and memory",
          "[hardening][limits]") {
  const std::size_t sizes[] = {10, static_cast<std::size_t>(100000 * test_scale()),
                               static_cast<std::size_t>(1000000 * test_scale())};
  const fs::path root = scratch_dir("million");
  struct Kind {
    std::vector<std::string> args;
    std::string line;
    std::function<nlohmann::json(std::size_t)> ids;
  };
  const auto probe = [](std::size_t n) { return "w0000000 " + entry(n - 1) + " zz"; };
  const std::vector<Kind> kinds = {
      {{"--tokenizer", "vocab", "--set", "vocab=vocab.txt", "--set", "unk_token='[UNK]'"},
       "",
       [](std::size_t n) {
         return nlohmann::json::array({1, n, 0});
       }},
      {{"--tokenizer", "wordpiece", "--set", "vocab=vocab.txt"},
       "",
       [](std::size_t n) {
         return nlohmann::json::array({1, n, 0});
       }},
      {{"--tokenizer", "bpe", "--set", "vocab=vocab.json", "--set", "merges=merges.txt"},
       "ab",
       [](std::size_t) { return nlohmann::json::array({256}); }}};
  for (std::size_t n : sizes) write_vocabularies(root / std::to_string(n), n);
  for (const Kind& kind : kinds) {
    std::vector<Load> loads;
    for (std::size_t n : sizes) {
      const fs::path dir = root / std::to_string(n);
      loads.push_back(
          tokenize(kind.args, dir, kind.line.empty() ? probe(n) : kind.line, kind.ids(n)));
    }
    const long small = loads[1].rss_kb - loads[0].rss_kb, big = loads[2].rss_kb - loads[0].rss_kb;
    INFO(kind.args[1] << ": " << sizes[1] << " entries: +" << small << " kB, " << loads[1].seconds
                      << " s; " << sizes[2] << " entries: +" << big << " kB, " << loads[2].seconds
                      << " s");
    // At most 1 kB per entry (the plugins need 100-250 bytes; a quadratic table would need
    // far more). An absolute bound rather than big/small: under ASan the smaller load's peak
    // is hidden below the process's own start-up peak, which makes the ratio meaningless.
    CHECK(big < static_cast<long>(sizes[2]));
    CHECK(loads[2].seconds < 60);
  }
}

TEST_CASE("limits: absurd lines in tokenizer files are refused with short messages",
          "[hardening][limits]") {
  const fs::path dir = scratch_dir("absurd_lines");
  const std::string huge(100000, 'x');
  write_file(dir / "vocab.txt", "[UNK]\n" + huge + "\nb\n");
  for (const char* plugin : {"vocab", "wordpiece"}) {
    INFO(plugin);
    CHECK_THROWS_WITH(
        make_tokenizer(plugin, {{"vocab", (dir / "vocab.txt").string()}}, plugin_dir()),
        (dir / "vocab.txt").string() +
            ":2: a line of 100000 bytes; a token is at most 65535 bytes (is this a "
            "vocabulary?)");
  }

  // A merges.txt line of 20 MB: the error names the file and line and quotes 64 bytes of it.
  const fs::path gpt2 = shared_dir() / "tokenizers" / "gpt2";
  write_file(dir / "merges.txt", "#version: 0.2\n\u0120 t\n" + std::string(20 << 20, 'a') + " b\n");
  try {
    make_tokenizer(
        "bpe",
        {{"vocab", (gpt2 / "vocab.json").string()}, {"merges", (dir / "merges.txt").string()}},
        plugin_dir());
    FAIL("the merges file was accepted");
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    CHECK(message.size() < 300);
    CHECK_THAT(message, Contains("merges.txt:3: the token 'aaaa"));
    CHECK_THAT(message, Contains("...' (20971520 bytes) is not in the vocabulary"));
  }

  // One id far beyond the number of tokens would size every id table by it (here 2^30 entries).
  std::string json = "{";
  int id = 0;
  for (const std::string& t : byte_tokens())
    json += nlohmann::json(t).dump() + ": " + std::to_string(id++) + ", ";
  write_file(dir / "vocab.json", json + "\"far\": 1073741824}");
  write_file(dir / "merges.txt", "#version: 0.2\n");
  CHECK_THROWS_WITH(make_tokenizer("bpe",
                                   {{"vocab", (dir / "vocab.json").string()},
                                    {"merges", (dir / "merges.txt").string()}},
                                   plugin_dir()),
                    (dir / "vocab.json").string() +
                        ": the largest id is 1073741824 but there are only 257 tokens (ids should "
                        "number them 0..256)");
}

TEST_CASE("limits: a layout longer than its record names both counts (plm query stream)",
          "[hardening][limits]") {
  // 64 characters are 66 tokens with [CLS] and [SEP]; the query stream doubles the positions.
  std::string text;
  for (int i = 0; i < 64; ++i) text += "北";
  const auto r = run_masque({"run", ready_pipeline("plm-score.yaml"), "-q"}, text + "\n");
  CHECK(r.exit_code == 1);
  const auto out = parse_jsonl(r.out);
  REQUIRE(out.size() == 1);
  CHECK_THAT(out[0]["error"].get<std::string>(),
             Contains("the record has 66 tokens and needs 130 positions, more than the model's "
                      "maximum positions (128)"));
}

TEST_CASE("limits: an empty order is a record error, not the mask's order", "[hardening][limits]") {
  const auto r =
      run_masque({"run", ready_pipeline("plm-score.yaml"), "-q", "--input-format", "jsonl"},
                 "{\"text\":\"北京\",\"order\":[]}\n{\"text\":\"北京\"}\n");
  CHECK(r.exit_code == 1);
  const auto out = parse_jsonl(r.out);
  REQUIRE(out.size() == 2);
  CHECK_THAT(out[0]["error"].get<std::string>(), Contains("'order' is an empty array"));
  CHECK_FALSE(out[1].contains("error"));
}

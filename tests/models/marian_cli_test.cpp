// The marian plugin through the CLI: the seq2seq task (encoder-decoder route, ids in, ids out)
// with greedy and beam search, and the config's end token, on the generated MarianMT folders,
// against marian_reference.py.
#include <catch2/catch.hpp>

#include "seq2seq_reference.hpp"

using namespace masque::test;

TEST_CASE("marian CLI: seq2seq greedy and beam give the reference tokens", "[marian][e2e]") {
  const std::filesystem::path fixture = MASQUE_MARIAN_FIXTURE;
  const nlohmann::json ref = read_json(fixture / "reference.json");
  for (const char* name : {"marian-shared", "marian-separate"}) {
    DYNAMIC_SECTION(name) {
      seq2seq::check_cli_decoding("marian", fixture / name, ref[name]);
    }
  }
}

TEST_CASE("marian CLI: the config's eos_token_id ends greedy decoding", "[marian][e2e]") {
  const std::filesystem::path fixture = MASQUE_MARIAN_FIXTURE;
  const nlohmann::json ref = read_json(fixture / "reference.json");
  for (const char* name : {"marian-shared", "marian-separate"}) {
    DYNAMIC_SECTION(name) {
      seq2seq::check_cli_end_token("marian", fixture / name, ref[name]);
    }
  }
}

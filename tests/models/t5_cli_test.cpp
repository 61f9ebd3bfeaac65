// The t5 plugin through the CLI: the seq2seq task (encoder-decoder route, ids in, ids out)
// with greedy and beam search, and the config's end token, on the generated T5 folders, against
// t5_reference.py.
#include <catch2/catch.hpp>

#include "seq2seq_reference.hpp"

using namespace masque::test;

TEST_CASE("t5 CLI: seq2seq greedy and beam give the reference tokens", "[t5][e2e]") {
  const std::filesystem::path fixture = MASQUE_T5_FIXTURE;
  const nlohmann::json ref = read_json(fixture / "reference.json");
  for (const char* name : {"t5-v1_0", "t5-v1_1"}) {
    DYNAMIC_SECTION(name) {
      seq2seq::check_cli_decoding("t5", fixture / name, ref[name]);
    }
  }
}

TEST_CASE("t5 CLI: the config's eos_token_id ends greedy decoding", "[t5][e2e]") {
  const std::filesystem::path fixture = MASQUE_T5_FIXTURE;
  const nlohmann::json ref = read_json(fixture / "reference.json");
  for (const char* name : {"t5-v1_0", "t5-v1_1"}) {
    DYNAMIC_SECTION(name) {
      seq2seq::check_cli_end_token("t5", fixture / name, ref[name]);
    }
  }
}

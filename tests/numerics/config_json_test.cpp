#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "masque/config_json.hpp"
#include "masque/error.hpp"
#include "test_support.hpp"

using namespace masque;

namespace {

void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    FAIL("no error");
  } catch (const ConfigError& e) {
    for (const auto& p : parts) CHECK_THAT(e.what(), Catch::Contains(p));
  }
}

}  // namespace

TEST_CASE("config.json values are typed and errors name file and key", "[numerics][config]") {
  const JsonConfig c = JsonConfig::parse(
      R"({"hidden_size": 64, "rms_norm_eps": 1e-05, "tie": true, "act": "silu", "eos": [2, 7],
          "bos": 1, "n": null, "half": 12.0})",
      "dir/config.json");
  CHECK(c.get_int("hidden_size") == 64);
  CHECK(c.get_int("half") == 12);
  CHECK(c.get_number("rms_norm_eps") == 1e-5);
  CHECK(c.get_number("hidden_size") == 64.0);
  CHECK(c.get_bool("tie"));
  CHECK(c.get_string("act") == "silu");
  CHECK(c.get_int_list("eos") == std::vector<std::int64_t>{2, 7});
  CHECK(c.get_int_list("bos") == std::vector<std::int64_t>{1});
  CHECK(c.get_int("n", 5) == 5);
  CHECK(c.get_int("absent", -1) == -1);
  CHECK(c.get_string("absent", "x") == "x");
  CHECK_FALSE(c.has("n"));
  CHECK(c.json()["eos"].size() == 2);
  expect_error([&] { c.get_int("absent"); }, {"dir/config.json", "'absent'", "missing"});
  expect_error([&] { c.get_int("act"); }, {"dir/config.json", "'act'", "integer"});
  expect_error([&] { c.get_bool("hidden_size", false); }, {"'hidden_size'", "true or false"});
  expect_error([&] { c.get_int("rms_norm_eps"); }, {"'rms_norm_eps'"});
  expect_error([] { JsonConfig::parse("{oops", "bad.json"); }, {"bad.json", "invalid JSON"});
  expect_error([] { JsonConfig::load("/nonexistent/config.json"); }, {"/nonexistent/config.json"});
}

TEST_CASE("the shared model configs read", "[numerics][config]") {
  const JsonConfig llama =
      JsonConfig::load(masque::test::shared_dir() / "models/stories260k/config.json");
  CHECK(llama.get_int("num_key_value_heads") == 4);
  CHECK(llama.get_number("rope_theta") == 10000.0);
  CHECK(llama.get_bool("tie_word_embeddings"));
}

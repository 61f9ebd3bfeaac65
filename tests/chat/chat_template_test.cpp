// ChatTemplate: the five real chat templates of ../shared/tokenizers-json render each
// conversation of conversations.jsonl as python3-jinja2 does in apply_chat_template's
// environment (chat_template_reference.py), and a folder's template is found as transformers
// finds it.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/chat_template.hpp"
#include "masque/error.hpp"

namespace fs = std::filesystem;
using masque::chat::ChatTemplate;

namespace {

std::vector<nlohmann::ordered_json> read_jsonl(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  INFO(path << " (the chat_fixture test writes it: run ctest -R chat)");
  REQUIRE(in);
  std::vector<nlohmann::ordered_json> rows;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) rows.push_back(nlohmann::ordered_json::parse(line));
  return rows;
}

fs::path tokenizers() {
  return fs::path(MASQUE_SHARED_DIR) / "tokenizers-json";
}

// A scratch folder of its own per test case, under the build's test output.
fs::path scratch(const std::string& name) {
  const fs::path dir = fs::path(MASQUE_CHAT_FIXTURE_DIR) / "scratch" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write(const fs::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::binary);
  out << text;
}

}  // namespace

TEST_CASE("the five real chat templates render byte-identical to python3-jinja2") {
  std::map<std::string, nlohmann::ordered_json> conversations;
  for (auto& c : read_jsonl(std::string(MASQUE_CHAT_TEST_DIR) + "/conversations.jsonl"))
    conversations[c["name"].get<std::string>()] = c;
  const auto expected = read_jsonl(std::string(MASQUE_CHAT_FIXTURE_DIR) + "/chat_expected.jsonl");
  REQUIRE(expected.size() == 2 * 5 * conversations.size());
  std::map<std::string, ChatTemplate> templates;
  int identical = 0, both_failed = 0;
  for (const auto& want : expected) {
    const std::string name = want["template"];
    if (!templates.count(name))
      templates.emplace(name, ChatTemplate::from_folder(tokenizers() / name));
    const auto& c = conversations.at(want["conversation"].get<std::string>());
    const bool agp = want["add_generation_prompt"];
    INFO(name << " / " << want["conversation"].get<std::string>()
              << " / add_generation_prompt=" << agp);
    std::string got, error;
    try {
      got = templates.at(name).render(c["messages"], c.value("tools", nlohmann::ordered_json()),
                                      agp, c.value("extra", nlohmann::ordered_json::object()));
    } catch (const masque::RecordError& e) {
      error = e.what();
    }
    if (want.contains("text")) {
      INFO("masque's error: " << error);
      REQUIRE(error.empty());
      CHECK(got == want["text"].get<std::string>());
      identical += got == want["text"].get<std::string>();
    } else {
      INFO("jinja2 failed with " << want["error"] << ": " << want["message"]);
      CHECK(!error.empty());
      if (want["error"] == "TemplateError")  // raise_exception: the same message
        CHECK(error.find(want["message"].get<std::string>()) != std::string::npos);
      both_failed += !error.empty();
    }
  }
  WARN(identical << " renders byte-identical and " << both_failed << " failing in both, of "
                 << expected.size() << " (" << conversations.size()
                 << " conversations x 5 templates x add_generation_prompt true/false)");
}

TEST_CASE("a folder's special tokens are the template's variables, as strings") {
  const ChatTemplate deepseek = ChatTemplate::from_folder(tokenizers() / "deepseek-v3");
  CHECK(deepseek.special_token("bos_token") == "<｜begin▁of▁sentence｜>");  // an AddedToken dict
  CHECK(deepseek.special_token("unk_token") == "");                         // null in the config
  const ChatTemplate qwen = ChatTemplate::from_folder(tokenizers() / "qwen3");
  CHECK(qwen.special_token("bos_token") == "");
  CHECK(qwen.special_token("eos_token") == "<|im_end|>");
  CHECK(qwen.source_name() ==
        (tokenizers() / "qwen3" / "tokenizer_config.json").string() + " chat_template");
  const ChatTemplate gemma = ChatTemplate::from_folder(tokenizers() / "gemma3");
  CHECK(gemma.special_token("image_token") == "<image_soft_token>");  // extra_special_tokens
}

TEST_CASE("chat_template.jinja wins over tokenizer_config.json, named templates pick default") {
  const fs::path dir = scratch("named");
  write(dir / "tokenizer_config.json",
        R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>", "chat_template": [
             {"name": "default", "template": "{{ bos_token }}D{{ messages|length }}"},
             {"name": "tool_use", "template": "T{{ tools|length if tools else 'none' }}{{ eos_token }}"}]})");
  const nlohmann::ordered_json messages =
      nlohmann::ordered_json::parse(R"([{"role": "user", "content": "x"}])");
  const nlohmann::ordered_json tools =
      nlohmann::ordered_json::parse(R"([{"name": "f"}, {"name": "g"}])");
  const ChatTemplate named = ChatTemplate::from_folder(dir);
  CHECK(named.render(messages) == "<s>D1");
  CHECK(named.render(messages, tools) == "T2</s>");  // transformers picks tool_use with tools
  CHECK(ChatTemplate::from_folder(dir, "tool_use").render(messages) == "Tnone</s>");
  CHECK_THROWS_WITH(
      ChatTemplate::from_folder(dir, "nope"),
      Catch::Contains("no chat template named 'nope'") && Catch::Contains("default, tool_use"));

  write(dir / "chat_template.jinja", "J{{ messages[0].content }}{{ add_generation_prompt }}\n");
  CHECK(ChatTemplate::from_folder(dir).render(messages, nullptr, false) == "JxFalse");
  CHECK(ChatTemplate::from_folder(dir).source_name() == (dir / "chat_template.jinja").string());
}

TEST_CASE("a folder without a usable template is a ConfigError naming the file and line") {
  CHECK_THROWS_AS(ChatTemplate::from_folder(tokenizers() / "no-such-folder"), masque::ConfigError);
  CHECK_THROWS_WITH(
      ChatTemplate::from_folder(tokenizers() / "t5-small"),
      Catch::Contains("no chat template") && Catch::Contains("tokenizer_config.json"));
  const fs::path dir = scratch("broken");
  write(dir / "tokenizer_config.json",
        R"({"chat_template": "{% for m in messages %}\n{% include 'x' %}{% endfor %}"})");
  CHECK_THROWS_WITH(ChatTemplate::from_folder(dir),
                    Catch::Contains("tokenizer_config.json chat_template line 2: unsupported") &&
                        Catch::Contains("include"));
  write(dir / "tokenizer_config.json", R"({"chat_template": "{{ x"})");
  CHECK_THROWS_AS(ChatTemplate::from_folder(dir), masque::ConfigError);
  write(dir / "tokenizer_config.json", "{not json");
  CHECK_THROWS_WITH(ChatTemplate::from_folder(dir), Catch::Contains("not valid JSON"));
}

TEST_CASE("a conversation the template refuses is a RecordError with its message") {
  const ChatTemplate gemma = ChatTemplate::from_folder(tokenizers() / "gemma3");
  const auto twice = nlohmann::ordered_json::parse(
      R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])");
  CHECK_THROWS_AS(gemma.render(twice), masque::RecordError);
  CHECK_THROWS_WITH(gemma.render(twice),
                    Catch::Contains("Conversation roles must alternate user/assistant"));
  CHECK_THROWS_AS(gemma.render(nlohmann::ordered_json::object()), masque::RecordError);
  const ChatTemplate odd = ChatTemplate::from_source("{{ 'x'.zfill(3) }}", "odd.jinja");
  CHECK_THROWS_AS(odd.render(nlohmann::ordered_json::array()), masque::ConfigError);
}

// `masque chat-template` through the binary: the five real templates over the conversations
// of conversations.jsonl give python3-jinja2's renders (chat_template_reference.py), text
// lines become user messages, and errors name the template's file and line.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include "test_support.hpp"

using masque::test::run_masque;
using nlohmann::ordered_json;

namespace {

std::vector<ordered_json> read_ordered_jsonl(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  INFO(path << " (the chat_fixture test writes it)");
  REQUIRE(in);
  std::vector<ordered_json> rows;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) rows.push_back(ordered_json::parse(line));
  return rows;
}

std::vector<ordered_json> output_lines(const std::string& out) {
  std::vector<ordered_json> rows;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) rows.push_back(ordered_json::parse(line));
  return rows;
}

std::string folder(const std::string& name) {
  return (masque::test::shared_dir() / "tokenizers-json" / name).string();
}

}  // namespace

TEST_CASE("masque chat-template renders the five templates as python3-jinja2 does") {
  const auto conversations =
      read_ordered_jsonl(std::string(MASQUE_CHAT_TEST_DIR) + "/conversations.jsonl");
  const auto expected =
      read_ordered_jsonl(std::string(MASQUE_CHAT_FIXTURE_DIR) + "/chat_expected.jsonl");
  using Key = std::tuple<std::string, std::string, bool>;
  std::map<Key, ordered_json> want;
  for (const auto& e : expected)
    want[Key(e["template"].get<std::string>(), e["conversation"].get<std::string>(),
             e["add_generation_prompt"].get<bool>())] = e;
  auto wanted = [&](const std::string& name, const ordered_json& c,
                    bool agp) -> const ordered_json& {
    return want.at(Key(name, c["name"].get<std::string>(), agp));
  };

  int identical = 0;
  for (const std::string name : {"llama3", "qwen3", "deepseek-v3", "gemma3", "phi-3-mini"}) {
    for (const bool agp : {true, false}) {
      // One run per template and flag over every conversation (one JSON record per line);
      // a conversation with variables of its own runs alone with --var.
      std::string input;
      std::vector<const ordered_json*> batch;
      for (const auto& c : conversations) {
        ordered_json record = {{"messages", c["messages"]}};
        if (c.contains("tools")) record["tools"] = c["tools"];
        std::vector<std::string> args = {"chat-template", folder(name)};
        if (!agp) args.push_back("--no-generation-prompt");
        if (!c.contains("extra")) {
          input += record.dump() + "\n";
          batch.push_back(&c);
          continue;
        }
        for (const auto& [key, value] : c["extra"].items())
          args.push_back("--var=" + key + "=" + value.dump());
        const auto run = run_masque(args, record.dump() + "\n");
        const auto& w = wanted(name, c, agp);
        INFO(name << " / " << c["name"].get<std::string>() << " " << run.err);
        REQUIRE(w.contains("text"));
        REQUIRE(run.exit_code == 0);
        CHECK(output_lines(run.out).at(0) == w["text"]);
        identical += output_lines(run.out).at(0) == w["text"];
      }
      std::vector<std::string> args = {"chat-template", folder(name)};
      if (!agp) args.push_back("--no-generation-prompt");
      const auto run = run_masque(args, input);
      const auto lines = output_lines(run.out);
      REQUIRE(lines.size() == batch.size());
      bool any_error = false;
      for (std::size_t i = 0; i < batch.size(); ++i) {
        const auto& w = wanted(name, *batch[i], agp);
        INFO(name << " / " << (*batch[i])["name"].get<std::string>() << " / agp " << agp);
        if (w.contains("text")) {
          CHECK(lines[i] == w["text"]);
          identical += lines[i] == w["text"];
        } else {
          any_error = true;
          REQUIRE(lines[i].is_object());
          CHECK(lines[i]["id"] == i);
          CHECK(lines[i].contains("error"));
        }
      }
      CHECK(run.exit_code == (any_error ? 1 : 0));
    }
  }
  WARN(identical << " prompts byte-identical through the binary");
}

TEST_CASE("masque chat-template: text lines are user messages, --system adds a system one") {
  const auto run =
      run_masque({"chat-template", folder("llama3"), "--system", "Be brief.", "--format", "text"},
                 "What is 2+2?\n");
  CHECK(run.exit_code == 0);
  CHECK(run.out ==
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n\n");
  // A JSON record without messages: its field is the user message; --system leaves a
  // conversation that has a system message alone.
  const auto json = run_masque({"chat-template", folder("phi-3-mini"), "--system", "S",
                                "--no-generation-prompt", "--field", "q"},
                               R"({"q": "hi"})"
                               "\n"
                               R"({"messages": [{"role": "system", "content": "own"}]})"
                               "\n");
  CHECK(json.exit_code == 0);
  const auto lines = output_lines(json.out);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "<|system|>\nS<|end|>\n<|user|>\nhi<|end|>\n<|endoftext|>");
  CHECK(lines[1] == "<|system|>\nown<|end|>\n<|endoftext|>");
}

TEST_CASE("masque chat-template: a bad record fails alone, a bad template stops with exit 2") {
  const auto run = run_masque(
      {"chat-template", folder("gemma3")},
      "{not json\n"
      R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]})"
      "\n"
      R"({"messages": [{"role": "user", "content": "fine"}]})"
      "\n");
  CHECK(run.exit_code == 1);
  const auto lines = output_lines(run.out);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0]["id"] == 0);
  CHECK(lines[0]["error"].get<std::string>().find("invalid JSON") != std::string::npos);
  CHECK(lines[1]["error"].get<std::string>().find("Conversation roles must alternate") !=
        std::string::npos);
  CHECK(lines[2] == "<bos><start_of_turn>user\nfine<end_of_turn>\n<start_of_turn>model\n");
  CHECK(run.err.find("record 1 (input line 2)") != std::string::npos);

  const auto dir = masque::test::scratch_dir("chat-template-unsupported");
  masque::test::write_file(
      dir / "tokenizer_config.json",
      R"({"chat_template": "{% for m in messages %}\n{{ m.content }}\n{% include 'x' %}{% endfor %}"})");
  const auto bad = run_masque({"chat-template", dir.string()}, "hi\n");
  CHECK(bad.exit_code == 2);
  CHECK(bad.out.empty());
  CHECK(bad.err.find((dir / "tokenizer_config.json").string() +
                     " chat_template line 3: unsupported") != std::string::npos);
  CHECK(bad.err.find("include") != std::string::npos);

  CHECK(run_masque({"chat-template"}).exit_code == 2);
  CHECK(run_masque({"chat-template", folder("t5-small")}, "hi\n").exit_code == 2);
  CHECK(run_masque(
            {"chat-template", folder("qwen3"), "--add-generation-prompt", "--no-generation-prompt"})
            .exit_code == 2);
  CHECK(run_masque({"chat-template", folder("qwen3"), "--format", "yaml"}).exit_code == 2);
}

TEST_CASE("masque chat-template --help documents every option and its default") {
  const auto run = run_masque({"chat-template", "--help"});
  CHECK(run.exit_code == 0);
  for (const char* option :
       {"--add-generation-prompt", "--no-generation-prompt", "--system", "--template", "--var",
        "--input-format", "--field", "--format", "--input", "--output"})
    CHECK(run.out.find(option) != std::string::npos);
  CHECK(run.out.find("(=auto)") != std::string::npos);
  CHECK(run.out.find("(=json)") != std::string::npos);
  CHECK(run_masque({"--help"}).out.find("chat-template DIR") != std::string::npos);
}

namespace {

std::string tiny_chat_model() {
  return (std::filesystem::path(MASQUE_CHAT_FIXTURE_DIR) / "tiny-qwen3").string();
}

// The ids lm-generate should start from: `conversation` rendered by `masque chat-template`
// (`extra` its options), tokenized without specials by `masque tokenize`.
std::string rendered_ids(const std::string& conversation, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"chat-template", tiny_chat_model()};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto rendered = run_masque(args, conversation + "\n");
  REQUIRE(rendered.exit_code == 0);
  const ordered_json text = ordered_json::parse(rendered.out);
  const auto tokens =
      run_masque({"tokenize", "--tokenizer", "tokenizer-json", "--set", "path=" + tiny_chat_model(),
                  "--no-special", "--input-format", "jsonl"},
                 ordered_json{{"text", text}}.dump() + "\n");
  REQUIRE(tokens.exit_code == 0);
  const ordered_json encoding = ordered_json::parse(tokens.out);
  std::string ids;
  for (const auto& id : encoding["ids"]) {
    if (!ids.empty()) ids += ' ';
    ids += std::to_string(id.get<int>());
  }
  return ids;
}

// lm-generate's greedy tokens for one input record.
ordered_json generated(const std::vector<std::string>& options, const std::string& input) {
  std::vector<std::string> args = {"run",
                                   "--task",
                                   "lm-generate",
                                   "--model",
                                   tiny_chat_model(),
                                   "--set",
                                   "decoder.max_new_tokens=6",
                                   "--set",
                                   "decoder.min_new_tokens=6"};
  args.insert(args.end(), options.begin(), options.end());
  const auto r = run_masque(args, input + "\n");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return ordered_json::parse(r.out)["tokens"];
}

}  // namespace

TEST_CASE("masque run --chat generates from the prompt the chat template renders") {
  const std::string conversation =
      R"({"messages": [{"role": "system", "content": "Answer in JSON."}, {"role": "user", "content": "Name a colour."}]})";
  const ordered_json from_ids =
      generated({"--input-format", "ids"}, rendered_ids(conversation, {}));
  CHECK(generated({"--chat", "--input-format", "jsonl"}, conversation) == from_ids);
  // A text record is one user message, after --system's message when there is one.
  CHECK(generated({"--chat", "--system", "Answer in JSON."}, "Name a colour.") ==
        generated({"--input-format", "ids"},
                  rendered_ids("Name a colour.", {"--system", "Answer in JSON."})));
  CHECK(generated({"--chat"}, "Name a colour.") != from_ids);
  // Without --chat a conversation is an error record saying what to do.
  const auto r = run_masque(
      {"run", "--task", "lm-generate", "--model", tiny_chat_model(), "--input-format", "jsonl"},
      conversation + "\n");
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("it needs lm-generate with task.chat: true (--chat)") != std::string::npos);
}

TEST_CASE("the worked batch job of docs/instruct.md: chat model, JSON schema, compressed corpus") {
  const auto dir = masque::test::scratch_dir("chat_batch_job");
  masque::test::write_file(dir / "answer.schema.json",
                           R"({"type": "object", "required": ["topic", "sentiment"],
 "properties": {"topic": {"type": "string", "maxLength": 40},
                "sentiment": {"enum": ["positive", "neutral", "negative"]}}})");
  std::string docs;
  for (int i = 0; i < 24; ++i)
    docs += ordered_json{{"text", "Document " + std::to_string(i) + ": the trains ran late again."}}
                .dump() +
            "\n";
  masque::test::write_file(dir / "docs.jsonl", docs);
  REQUIRE(std::system(("zstd -q -f " + (dir / "docs.jsonl").string()).c_str()) == 0);
  const auto r = run_masque({"run", "--task", "lm-generate", "--model", tiny_chat_model(), "--chat",
                             "--system", R"(Reply with JSON: {"topic": ..., "sentiment": ...})",
                             "--json-schema", (dir / "answer.schema.json").string(), "--set",
                             "decoder.max_new_tokens=64", "-i", (dir / "docs.jsonl.zst").string(),
                             "--input-format", "jsonl", "-o", (dir / "answers.jsonl.gz").string(),
                             "--resume"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const std::string out = (dir / "answers.jsonl").string();
  REQUIRE(std::system(("gzip -dc " + (dir / "answers.jsonl.gz").string() + " > " + out).c_str()) ==
          0);
  CHECK(std::system(("python3 " + masque::test::source_dir().string() +
                     "/tests/grammar/json_schema_check.py " +
                     (dir / "answer.schema.json").string() + " " + out + " text")
                        .c_str()) == 0);
  CHECK(masque::test::read_jsonl(out).size() == 24);
}

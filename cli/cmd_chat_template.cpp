// masque chat-template: a folder's chat template rendered over conversations, for checking
// what prompt a model would get (core/src/chat).
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "chat/chat_template.hpp"
#include "common.hpp"
#include "io/records.hpp"
#include "json_depth.hpp"
#include "masque/error.hpp"

namespace masque::cli {

namespace {

const char* kHelp = R"(Usage: masque chat-template DIR [options] < conversations.jsonl

Renders each input record with the chat template of the model or tokenizer folder DIR
(chat_template.jinja, else the chat_template of tokenizer_config.json) exactly as transformers'
apply_chat_template renders it, and prints the prompt: one JSON string per line, or the text.

Input, one record per line:
  {"messages": [{"role": "user", "content": "..."}, ...], "tools": [...]}
      a conversation; "tools" (JSON schemas) is optional
  {"text": "..."}   a JSON object without "messages": its --field becomes one user message
  plain text        (not starting with '{', or with --input-format text) one user message
The template sees messages, tools (none when absent), add_generation_prompt, documents (none)
and the folder's special tokens (bos_token, eos_token, ...); --var adds more.
The rendered prompt already holds the template's special tokens: tokenize it without adding
specials again (masque tokenize --no-special).

Errors: a template that is not valid Jinja or uses a construct outside masque's Jinja subset
stops the command with exit code 2, naming the file and the template's line. A record the
template refuses (raise_exception, e.g. roles that do not alternate) or that cannot be read
gets {"id": N, "error": "..."} in its place (nothing with --format text), a message on
stderr, and exit code 1 at the end.

Examples:
  echo '{"messages": [{"role": "user", "content": "Hi!"}]}' | \
      masque chat-template ../shared/tokenizers-json/qwen3 --format text
  echo "What is 2+2?" | masque chat-template ../shared/tokenizers-json/llama3 --system "Be brief."
  masque chat-template DIR --no-generation-prompt --var enable_thinking=false < chats.jsonl
)";

// --var KEY=VALUE: the value as JSON when it parses (false, 3, [1]), else as a string.
nlohmann::ordered_json parse_vars(const std::vector<std::string>& vars) {
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  for (const std::string& v : vars) {
    const std::size_t eq = v.find('=');
    if (eq == std::string::npos || eq == 0)
      throw ConfigError("--var: expected KEY=VALUE, got '" + v + "'");
    const std::string value = v.substr(eq + 1);
    nlohmann::ordered_json parsed;
    try {
      parsed = parse_json_bounded<nlohmann::ordered_json>(value);
    } catch (const std::exception&) {
      parsed = value;
    }
    extra[v.substr(0, eq)] = parsed;
  }
  return extra;
}

struct Conversation {
  nlohmann::ordered_json messages;
  nlohmann::ordered_json tools;
};

nlohmann::ordered_json user_message(const std::string& text) {
  return {{"role", "user"}, {"content", text}};
}

// One input line as a conversation; RecordError when it cannot be one.
Conversation read_conversation(const std::string& line, const std::string& input_format,
                               const std::string& field) {
  Conversation c;
  const std::size_t first = line.find_first_not_of(" \t");
  const bool json = input_format == "jsonl" ||
                    (input_format == "auto" && first != std::string::npos && line[first] == '{');
  if (!json) {
    c.messages = nlohmann::ordered_json::array({user_message(line)});
    return c;
  }
  nlohmann::ordered_json record;
  try {
    record = parse_json_bounded<nlohmann::ordered_json>(line);
  } catch (const std::exception& e) {
    throw RecordError(std::string("invalid JSON: ") + e.what());
  }
  if (!record.is_object())
    throw RecordError("expected a JSON object per line, got " + std::string(record.type_name()));
  if (record.contains("messages")) {
    c.messages = record["messages"];
    if (!c.messages.is_array()) throw RecordError("'messages' must be a list of messages");
    for (const auto& m : c.messages)
      if (!m.is_object())
        throw RecordError("each message must be an object ({\"role\", \"content\"})");
  } else if (record.contains(field)) {
    if (!record[field].is_string()) throw RecordError("field '" + field + "' must be a string");
    c.messages = nlohmann::ordered_json::array({user_message(record[field].get<std::string>())});
  } else {
    throw RecordError("no 'messages' and no '" + field + "' field (choose the field with --field)");
  }
  c.tools = record.value("tools", nlohmann::ordered_json());
  if (!c.tools.is_null() && !c.tools.is_array()) throw RecordError("'tools' must be a list");
  return c;
}

// --system: a system message first, unless the conversation starts with one.
void add_system(Conversation& c, const std::string& system) {
  if (!c.messages.empty() && c.messages[0].value("role", "") == "system") return;
  // One object: insert() with a braced list would insert its two pairs as elements.
  const nlohmann::ordered_json message = {{"role", "system"}, {"content", system}};
  c.messages.insert(c.messages.begin(), message);
}

}  // namespace

int cmd_chat_template(int argc, char** argv) {
  po::options_description o("Options");
  o.add_options()("help,h", "this help")(
      "add-generation-prompt", po::bool_switch(),
      "end with the header of the assistant's turn (the default)")(
      "no-generation-prompt", po::bool_switch(),
      "do not: add_generation_prompt=false (e.g. to render a finished conversation)")(
      "system", po::value<std::string>(),
      "a system message put first in every conversation that does not start with one "
      "(default: none)")(
      "template", po::value<std::string>()->default_value(""),
      "which of a folder's named chat templates (default: 'default', or 'tool_use' for a "
      "record with tools)")(
      "var", po::value<std::vector<std::string>>()->composing(),
      "KEY=VALUE: one more template variable, the value read as JSON when it is JSON "
      "(enable_thinking=false), else as text (repeatable; default: none)")(
      "input-format", po::value<std::string>()->default_value("auto"),
      "auto (a line starting with '{' is a JSON record, any other a user message), jsonl or "
      "text")("field", po::value<std::string>()->default_value("text"),
              "the field of a JSON record without \"messages\" that becomes the user message")(
      "format,f", po::value<std::string>()->default_value("json"),
      "json (each prompt as one JSON string per line) or text (the prompt as it is, then a "
      "newline)")("input,i", po::value<std::string>()->default_value("-"),
                  "input file (- = stdin; a FILE.gz or FILE.zst is read decompressed)")(
      "output,o", po::value<std::string>()->default_value("-"),
      "output file (- = stdout; an OUT.gz or OUT.zst is written compressed)");
  po::options_description hidden;
  hidden.add_options()("folder", po::value<std::string>());
  po::positional_options_description pos;
  pos.add("folder", 1);
  po::variables_map vm = parse(argc, argv, o, hidden, pos);
  if (vm.count("help")) {
    std::cout << kHelp << "\n" << o << "\n";
    return kExitOk;
  }
  if (!vm.count("folder"))
    throw ConfigError(
        "masque chat-template: give the model or tokenizer folder DIR (see masque chat-template "
        "--help)");
  if (vm["add-generation-prompt"].as<bool>() && vm["no-generation-prompt"].as<bool>())
    throw ConfigError("--add-generation-prompt and --no-generation-prompt: give one of them");
  const bool add_generation_prompt = !vm["no-generation-prompt"].as<bool>();
  const std::string format = vm["format"].as<std::string>();
  if (format != "json" && format != "text")
    throw ConfigError("--format: expected json or text, got '" + format + "'");
  const std::string input_format = vm["input-format"].as<std::string>();
  if (input_format != "auto" && input_format != "jsonl" && input_format != "text")
    throw ConfigError("--input-format: expected auto, jsonl or text, got '" + input_format + "'");
  const std::string field = vm["field"].as<std::string>();
  const nlohmann::ordered_json extra = parse_vars(
      vm.count("var") ? vm["var"].as<std::vector<std::string>>() : std::vector<std::string>{});

  const chat::ChatTemplate chat = chat::ChatTemplate::from_folder(vm["folder"].as<std::string>(),
                                                                  vm["template"].as<std::string>());
  Streams streams;
  open_streams(vm, streams);
  InputOptions input;
  input.format = InputFormat::text;  // lines; this command tells JSON records from text itself
  RecordReader reader = streams.source ? RecordReader(std::move(streams.source), input)
                                       : RecordReader(streams.in, input);
  Record record;
  std::uint64_t failed = 0;
  while (reader.next(record)) {
    std::string prompt, error = record.error;
    if (error.empty()) {
      try {
        Conversation c = read_conversation(record.text, input_format, field);
        if (vm.count("system")) add_system(c, vm["system"].as<std::string>());
        prompt = chat.render(c.messages, c.tools, add_generation_prompt, extra);
      } catch (const RecordError& e) {
        error = e.what();
      }
    }
    std::string line;
    if (!error.empty()) {
      ++failed;
      std::fprintf(stderr, "masque chat-template: record %llu (input line %llu): %s\n",
                   static_cast<unsigned long long>(record.id),
                   static_cast<unsigned long long>(record.id + 1), error.c_str());
      if (format == "json")
        line = nlohmann::ordered_json{{"id", record.id}, {"error", error}}.dump(
                   -1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) +
               "\n";
    } else if (format == "json") {
      line = nlohmann::ordered_json(prompt).dump(-1, ' ', false,
                                                 nlohmann::ordered_json::error_handler_t::replace) +
             "\n";
    } else {
      line = prompt + "\n";
    }
    if (!line.empty() && std::fwrite(line.data(), 1, line.size(), streams.out) != line.size())
      throw RuntimeError("cannot write the output");
  }
  if (const std::string error = streams.close_output(); !error.empty())
    throw RuntimeError("cannot write the output: " + error);
  return failed ? kExitRecordsFailed : kExitOk;
}

}  // namespace masque::cli

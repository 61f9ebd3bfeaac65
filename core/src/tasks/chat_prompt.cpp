#include "tasks/chat_prompt.hpp"

#include "masque/error.hpp"

namespace masque {

namespace {

// The folder a section's `path` names, or "".
std::string section_path(const Pipeline& pipeline, const char* section) {
  if (!pipeline.has(section)) return "";
  const Params& params = pipeline.at(section).params;
  return params.has("path") ? params.get_string("path") : "";
}

}  // namespace

std::unique_ptr<ChatPrompt> ChatPrompt::from_pipeline(const Pipeline& pipeline) {
  const Params& task = pipeline.task_params;
  if (!task.get_bool("chat")) {
    if (!task.get_string("system").empty())
      throw ConfigError("task.system: a system message needs task.chat: true (or --chat)");
    return nullptr;
  }
  std::string dir = task.get_string("chat_template");
  if (dir.empty()) dir = section_path(pipeline, "tokenizer");
  if (dir.empty()) dir = section_path(pipeline, "model");
  if (dir.empty())
    throw ConfigError(
        "task.chat: no folder to take the chat template from (set task.chat_template to the "
        "model folder)");
  return std::unique_ptr<ChatPrompt>(
      new ChatPrompt(chat::ChatTemplate::from_folder(dir), task.get_string("system")));
}

std::string ChatPrompt::render(const Record& record) const {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools = nullptr;
  if (const auto it = record.fields.find("messages"); it != record.fields.end()) {
    if (!it->is_array() || it->empty())
      throw RecordError("\"messages\": expected a non-empty list of {\"role\", \"content\"}");
    for (const auto& m : *it)
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
        throw RecordError("\"messages\": every message needs a \"role\" string");
    messages = *it;
    if (const auto t = record.fields.find("tools"); t != record.fields.end()) tools = *t;
  } else {
    messages.push_back({{"role", "user"}, {"content", record.text}});
  }
  // task.system goes first where a conversation has no system message (as chat-template's
  // --system).
  if (!system_.empty() && messages.front().value("role", "") != "system")
    messages.insert(messages.begin(),
                    nlohmann::ordered_json{{"role", "system"}, {"content", system_}});
  return template_.render(messages, tools, true);
}

}  // namespace masque

// A model's chat template: how its conversations are spelled as one prompt text. The
// template comes from the model or tokenizer folder (`chat_template.jinja`, else the
// `chat_template` of `tokenizer_config.json`: a string, or a list of {name, template}) and
// renders as transformers' `apply_chat_template` renders it: the variables messages, tools,
// documents (none), add_generation_prompt and the special tokens of the tokenizer config
// (bos_token, eos_token, ... as strings) on masque's Jinja interpreter (chat/jinja_*).
//
// The rendered text already holds the template's special tokens (bos_token and the like):
// tokenize it without adding specials again.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/jinja_template.hpp"

namespace masque::chat {

class ChatTemplate {
 public:
  // The folder's template. `name` picks one of several named templates; empty: "default",
  // or "tool_use" when rendering with tools and the folder has one (as transformers picks).
  // ConfigError naming the file (and the template's line) when the folder has no template,
  // a file is not valid JSON, or the template is not valid Jinja or outside masque's subset.
  static ChatTemplate from_folder(const std::filesystem::path& dir, const std::string& name = "");

  // A template given as text, with the tokenizer config's special tokens (`config` holds
  // bos_token, eos_token, ... as strings or {"content": ...} objects; the rest is ignored).
  static ChatTemplate from_source(
      const std::string& source, const std::string& source_name,
      const nlohmann::ordered_json& config = nlohmann::ordered_json::object());

  // The prompt for one conversation: `messages` is a list of {role, content, ...} objects,
  // `tools` a list of JSON schemas or null, `extra` more variables (e.g. enable_thinking),
  // which override the special tokens as apply_chat_template's keyword arguments do.
  // RecordError when the template fails for this conversation (raise_exception, an undefined
  // value used, a type error), ConfigError when it needs a construct masque does not have.
  // Const and safe to call from several threads at once.
  std::string render(const nlohmann::ordered_json& messages,
                     const nlohmann::ordered_json& tools = nullptr,
                     bool add_generation_prompt = true,
                     const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  // Where the template came from ("DIR/tokenizer_config.json chat_template", ...).
  const std::string& source_name() const;
  // A special token's text as the template sees it ("" when the config has none).
  std::string special_token(const std::string& name) const;

 private:
  struct Named {
    std::string name;
    jinja::Template jinja;
  };
  const jinja::Template& pick(bool with_tools) const;

  std::vector<Named> templates_;  // one unnamed, or the config's named ones
  std::string requested_;         // the name asked for, if any
  jinja::Dict specials_;          // bos_token, eos_token, ... and additional_special_tokens
};

}  // namespace masque::chat

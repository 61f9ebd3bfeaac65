#include "chat/chat_template.hpp"

#include <optional>

#include "io/read_file.hpp"
#include "json_depth.hpp"
#include "masque/error.hpp"

namespace fs = std::filesystem;

namespace masque::chat {

namespace {

using jinja::Value;

// A special token as the config writes it: "text", or an AddedToken {"content": "text", ...}.
std::optional<std::string> token_text(const nlohmann::ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return std::nullopt;
}

// transformers' special_tokens_map: the tokens the config sets (None and "" are left out),
// additional_special_tokens as a list, and the model's extra_special_tokens by their names.
void add_special_tokens(jinja::Dict& specials, const nlohmann::ordered_json& config) {
  if (!config.is_object()) return;
  for (const char* name : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                           "cls_token", "mask_token"}) {
    if (!config.contains(name)) continue;
    const auto text = token_text(config[name]);
    if (text && !text->empty()) specials.set(name, Value(*text));
  }
  if (config.contains("additional_special_tokens") &&
      config["additional_special_tokens"].is_array()) {
    jinja::List tokens;
    for (const auto& t : config["additional_special_tokens"])
      if (auto text = token_text(t)) tokens.emplace_back(*text);
    if (!tokens.empty()) specials.set("additional_special_tokens", Value(std::move(tokens)));
  }
  if (config.contains("extra_special_tokens") && config["extra_special_tokens"].is_object())
    for (const auto& [name, t] : config["extra_special_tokens"].items())
      if (auto text = token_text(t); text && !text->empty()) specials.set(name, Value(*text));
}

nlohmann::ordered_json read_json(const fs::path& file, const std::string& what) {
  const std::string text = io::read_file(file, what);
  try {
    return parse_json_bounded<nlohmann::ordered_json>(text);
  } catch (const std::exception& e) {
    throw ConfigError(file.string() + ": not valid JSON (" + e.what() + ")");
  }
}

jinja::Template compile(const std::string& source, const std::string& source_name) {
  try {
    return jinja::Template::parse(source, source_name);
  } catch (const jinja::TemplateError& e) {
    throw ConfigError(e.what());
  }
}

}  // namespace

ChatTemplate ChatTemplate::from_folder(const fs::path& dir, const std::string& name) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw ConfigError(dir.string() + ": not a folder");
  ChatTemplate t;
  t.requested_ = name;
  const fs::path config_file = dir / "tokenizer_config.json";
  const fs::path jinja_file = dir / "chat_template.jinja";
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  if (fs::exists(config_file, ec)) config = read_json(config_file, "tokenizer config");
  add_special_tokens(t.specials_, config);
  // special_tokens_map.json wins over tokenizer_config.json, as in from_pretrained.
  if (const fs::path map_file = dir / "special_tokens_map.json"; fs::exists(map_file, ec))
    add_special_tokens(t.specials_, read_json(map_file, "special tokens map"));

  if (fs::exists(jinja_file, ec)) {  // a separate file wins over the config's key
    t.templates_.push_back(
        {"", compile(io::read_file(jinja_file, "chat template"), jinja_file.string())});
  } else if (config.contains("chat_template")) {
    const auto& source = config["chat_template"];
    const std::string where = config_file.string() + " chat_template";
    if (source.is_string()) {
      t.templates_.push_back({"", compile(source.get<std::string>(), where)});
    } else if (source.is_array()) {
      for (const auto& entry : source) {
        if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
            !entry.contains("template") || !entry["template"].is_string())
          throw ConfigError(where + ": expected a string or a list of {\"name\", \"template\"}");
        const std::string n = entry["name"].get<std::string>();
        t.templates_.push_back(
            {n, compile(entry["template"].get<std::string>(), where + " '" + n + "'")});
      }
    } else {
      throw ConfigError(where + ": expected a string or a list of {\"name\", \"template\"}");
    }
  } else {
    throw ConfigError(dir.string() + ": no chat template (no chat_template.jinja, and " +
                      (fs::exists(config_file, ec) ? config_file.string() + " has no chat_template"
                                                   : "no tokenizer_config.json") +
                      ")");
  }
  if (t.templates_.empty())
    throw ConfigError(config_file.string() + ": chat_template is an empty list");
  if (!name.empty()) {
    bool found = false;
    std::string names;
    for (const auto& n : t.templates_) {
      found = found || n.name == name;
      if (!n.name.empty()) names += (names.empty() ? "" : ", ") + n.name;
    }
    if (!found)
      throw ConfigError(dir.string() + ": no chat template named '" + name + "'" +
                        (names.empty() ? " (it has one, unnamed)" : " (it has " + names + ")"));
  }
  return t;
}

ChatTemplate ChatTemplate::from_source(const std::string& source, const std::string& source_name,
                                       const nlohmann::ordered_json& config) {
  ChatTemplate t;
  add_special_tokens(t.specials_, config);
  t.templates_.push_back({"", compile(source, source_name)});
  return t;
}

const jinja::Template& ChatTemplate::pick(bool with_tools) const {
  if (templates_.size() == 1 && requested_.empty()) return templates_[0].jinja;
  auto find = [this](const std::string& n) -> const jinja::Template* {
    for (const auto& t : templates_)
      if (t.name == n) return &t.jinja;
    return nullptr;
  };
  if (!requested_.empty()) return *find(requested_);
  if (with_tools)
    if (const auto* t = find("tool_use")) return *t;
  if (const auto* t = find("default")) return *t;
  throw ConfigError(templates_[0].jinja.source_name() +
                    ": several chat templates and none named 'default'; choose one by name");
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages,
                                 const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                 const nlohmann::ordered_json& extra) const {
  if (!messages.is_array()) throw RecordError("messages: expected a list of messages");
  if (!tools.is_null() && !tools.is_array()) throw RecordError("tools: expected a list of tools");
  const jinja::Template& jinja = pick(!tools.is_null());
  jinja::Dict variables = specials_;
  try {
    variables.set("messages", Value::from_json(messages));
    variables.set("tools", tools.is_null() ? Value::none() : Value::from_json(tools));
    variables.set("documents", Value::none());
    variables.set("add_generation_prompt", Value(add_generation_prompt));
    if (extra.is_object())
      for (const auto& [key, value] : extra.items()) variables.set(key, Value::from_json(value));
  } catch (const jinja::ValueError& e) {
    throw RecordError(e.what());
  }
  try {
    return jinja.render(variables);
  } catch (const jinja::TemplateError& e) {
    if (e.kind() == jinja::TemplateError::Kind::render) throw RecordError(e.what());
    throw ConfigError(e.what());
  }
}

const std::string& ChatTemplate::source_name() const {
  const std::string wanted = requested_.empty() ? "default" : requested_;
  for (const auto& t : templates_)
    if (t.name == wanted) return t.jinja.source_name();
  return templates_[0].jinja.source_name();
}

std::string ChatTemplate::special_token(const std::string& name) const {
  const Value* v = specials_.find(name);
  return v && v->is_string() ? v->as_string() : std::string();
}

}  // namespace masque::chat

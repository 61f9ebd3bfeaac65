// lm-generate's chat records (task.chat): each record's conversation rendered with the model's
// chat template into the prompt, which is then tokenized without adding specials again.
#pragma once

#include <memory>
#include <string>

#include "chat/chat_template.hpp"
#include "io/records.hpp"
#include "pipeline.hpp"

namespace masque {

class ChatPrompt {
 public:
  // The pipeline's chat prompt, or null when task.chat is false. The template comes from
  // task.chat_template (a folder), else the tokenizer's folder, else the model's. ConfigError
  // when there is none or it does not parse.
  static std::unique_ptr<ChatPrompt> from_pipeline(const Pipeline& pipeline);

  // A record's prompt: its "messages" (a list of {role, content}; with its "tools", if any), or
  // its text as one user message; task.system first where the conversation has no system
  // message. RecordError for a malformed conversation or one the template refuses.
  std::string render(const Record& record) const;

 private:
  ChatPrompt(chat::ChatTemplate chat_template, std::string system)
      : template_(std::move(chat_template)), system_(std::move(system)) {}
  chat::ChatTemplate template_;
  std::string system_;
};

}  // namespace masque

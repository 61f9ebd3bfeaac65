// A generating task's `stop` strings: a hypothesis ends where its decoded text first holds one
// (across token boundaries), and its output text ends just before it.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/records.hpp"
#include "masque/tokenizer.hpp"

namespace masque {

class StopStrings {
 public:
  StopStrings() = default;
  // ConfigError naming `key` for an empty string (it would stop every hypothesis at once).
  StopStrings(const Tokenizer* tokenizer, std::vector<std::string> stops, const std::string& key);

  bool empty() const { return stops_.empty(); }
  // True when the text of the last tokens of `tokens` holds a stop string. Only a window of
  // them is decoded (the longest stop's bytes, and a few more, in tokens: a stop string that
  // ends in the newest token lies inside it), so a step costs the same at any length.
  bool matches(std::span<const TokenId> tokens) const;
  // `text` cut just before the first stop string it holds (all of it when it holds none).
  std::string_view cut(std::string_view text) const;

 private:
  const Tokenizer* tokenizer_ = nullptr;
  std::vector<std::string> stops_;
  std::size_t window_ = 0;  // tokens decoded by matches()
};

// A task's `stop` list (`key` names it in errors), or null when it is empty.
std::shared_ptr<const StopStrings> task_stop_strings(const Tokenizer* tokenizer,
                                                     std::vector<std::string> stops,
                                                     const std::string& key);
// A JSON record's own "stop" (a string or a list of strings), which replaces the task's; null
// when it has none. RecordError for anything else, an empty string, or with --stream (a
// streamed text could show the start of a stop string before it is complete).
std::shared_ptr<const StopStrings> record_stop_strings(const Record& record,
                                                       const Tokenizer* tokenizer);

}  // namespace masque

#include "tasks/stop_strings.hpp"

#include <algorithm>

#include "masque/error.hpp"
#include "run/stream.hpp"
#include "tasks/common.hpp"

namespace masque {

namespace {

// Tokens that decode to no byte (specials, skipped when decoding) may sit inside a match:
// the window allows this many of them.
constexpr std::size_t kSpareTokens = 8;

}  // namespace

StopStrings::StopStrings(const Tokenizer* tokenizer, std::vector<std::string> stops,
                         const std::string& key)
    : tokenizer_(tokenizer), stops_(std::move(stops)) {
  std::size_t longest = 0;
  for (const std::string& s : stops_) {
    if (s.empty()) throw ConfigError(key + ": a stop string is empty (it would stop at once)");
    longest = std::max(longest, s.size());
  }
  // Every token that decodes to text gives at least one byte.
  window_ = longest + kSpareTokens;
}

bool StopStrings::matches(std::span<const TokenId> tokens) const {
  if (stops_.empty() || tokens.empty()) return false;
  const std::size_t n = std::min(tokens.size(), window_);
  const std::string text = detokenize(tokenizer_, tokens.subspan(tokens.size() - n));
  return std::any_of(stops_.begin(), stops_.end(),
                     [&](const std::string& s) { return text.find(s) != std::string::npos; });
}

std::string_view StopStrings::cut(std::string_view text) const {
  std::size_t end = text.size();
  for (const std::string& s : stops_) end = std::min(end, text.find(s));
  return text.substr(0, end);
}

std::shared_ptr<const StopStrings> task_stop_strings(const Tokenizer* tokenizer,
                                                     std::vector<std::string> stops,
                                                     const std::string& key) {
  if (stops.empty()) return nullptr;
  if (StreamSink::active())
    throw ConfigError(
        "--stream with " + key +
        ": a streamed text could show the start of a stop string before it is complete (run "
        "without --stream)");
  return std::make_shared<const StopStrings>(tokenizer, std::move(stops), key);
}

std::shared_ptr<const StopStrings> record_stop_strings(const Record& record,
                                                       const Tokenizer* tokenizer) {
  const auto it = record.fields.find("stop");
  if (it == record.fields.end() || it->is_null()) return nullptr;
  if (StreamSink::active())
    throw RecordError(
        "\"stop\" with --stream: a streamed text could show the start of a stop string before "
        "it is complete");
  std::vector<std::string> list;
  for (const auto& s : it->is_array() ? *it : nlohmann::ordered_json::array({*it})) {
    if (!s.is_string()) throw RecordError("\"stop\": expected a string or a list of strings");
    list.push_back(s.get<std::string>());
  }
  try {
    return std::make_shared<const StopStrings>(tokenizer, std::move(list), "\"stop\"");
  } catch (const ConfigError& e) {  // an empty string: this record's fault alone
    throw RecordError(e.what());
  }
}

}  // namespace masque

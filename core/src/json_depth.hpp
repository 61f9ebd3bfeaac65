// JSON that masque reads from files and records nests at most kMaxJsonDepth levels deep.
// nlohmann's parser itself is iterative, but copying, comparing and printing a value recurse
// once per level: a corpus line of 100k '[' parses fine and then overflows the stack wherever
// the value is copied (a record's fields) or printed (an error message).
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace masque {

inline constexpr int kMaxJsonDepth = 256;

class JsonTooDeep : public std::runtime_error {
 public:
  JsonTooDeep()
      : std::runtime_error("JSON nested more than " + std::to_string(kMaxJsonDepth) +
                           " levels deep") {}
};

// Json::parse(input...) (a string, a stream, or two iterators), throwing JsonTooDeep when
// arrays and objects nest more than kMaxJsonDepth levels (and Json's parse_error on invalid
// JSON, as Json::parse does).
template <class Json, class... Input>
Json parse_json_bounded(Input&&... input) {
  // `depth` is the number of enclosing arrays and objects of the event's value.
  return Json::parse(std::forward<Input>(input)...,
                     [](int depth, typename Json::parse_event_t, Json&) {
                       if (depth >= kMaxJsonDepth) throw JsonTooDeep();
                       return true;
                     });
}

}  // namespace masque

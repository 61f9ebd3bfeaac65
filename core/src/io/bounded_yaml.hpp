// YAML text loaded with bounds on what it may cost: a pipeline file of any content fails fast,
// with a message naming the file, line and column, and in bounded memory.
//
// yaml-cpp 0.7 (Debian 12) has no limits of its own beyond its parser's nesting depth (500), and
// its LoadAll() loops forever on a document it cannot advance past (e.g. a stray ',' where a
// block starts), growing a vector of empty documents until memory runs out. So the text is first
// checked against the YAML character set, then its events are counted in one pass over
// YAML::Parser (with a progress check instead of LoadAll's loop), and only a text within every
// bound is built into nodes.
#pragma once

#include <cstddef>
#include <string>

#include <yaml-cpp/yaml.h>

namespace masque::io {

struct YamlLimits {
  std::size_t max_bytes = 1 << 20;  // the text's size
  std::size_t max_nodes = 100000;   // scalars, lists and mappings, each alias expanded
  std::size_t max_documents = 64;   // documents counted before giving up counting
};

struct YamlDocuments {
  YAML::Node first;       // null for an empty text
  std::size_t count = 0;  // documents in the text (separated by ---)
};

// "WHERE:LINE:COLUMN" (or WHERE for a mark without a position).
std::string yaml_mark_text(const std::string& where, const YAML::Mark& mark);

// The first document of `text` and how many there are. ConfigError "WHERE[:LINE:COL]: invalid
// YAML: ..." for text that is not UTF-8 YAML, that yaml-cpp rejects or cannot advance through, or
// that breaks a limit.
YamlDocuments load_bounded_yaml(const std::string& text, const std::string& where,
                                const YamlLimits& limits = {});

}  // namespace masque::io

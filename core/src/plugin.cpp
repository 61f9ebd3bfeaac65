#include "masque/plugin.hpp"

namespace masque {

Plugin::~Plugin() = default;

const char* to_string(PluginKind kind) {
  switch (kind) {
    case PluginKind::tokenizer:
      return "tokenizer";
    case PluginKind::mask:
      return "mask";
    case PluginKind::model:
      return "model";
    case PluginKind::decoder:
      return "decoder";
    case PluginKind::constraint:
      return "constraint";
  }
  return "unknown";
}

const char* to_string(ParamType type) {
  switch (type) {
    case ParamType::boolean:
      return "bool";
    case ParamType::integer:
      return "int";
    case ParamType::number:
      return "float";
    case ParamType::string:
      return "string";
    case ParamType::path:
      return "path";
    case ParamType::int_list:
      return "int list";
    case ParamType::string_list:
      return "string list";
  }
  return "unknown";
}

}  // namespace masque

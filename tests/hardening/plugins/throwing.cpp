// A tokenizer that misbehaves on purpose, for the tests of how masque contains plugin
// failures: the record "logic" makes encode throw std::logic_error, "int" throws an int,
// "config" a ConfigError and "record" a RecordError. Any other text is one token per byte
// (id = the byte), so its ids fit every model vocabulary of 256 ids or more. The parameter
// `factory` makes its factory misbehave instead: return nothing, return a plugin of another
// kind, or throw an int.
#include <stdexcept>
#include <string>

#include "masque/error.hpp"
#include "masque/params.hpp"
#include "masque/tokenizer.hpp"

namespace {

class Throwing final : public masque::Tokenizer {
 public:
  masque::Encoding encode(std::string_view text, bool) const override {
    if (text == "logic") throw std::logic_error("the plugin's own bug");
    if (text == "int") throw 42;
    if (text == "config") throw masque::ConfigError("a setting the plugin only checks late");
    if (text == "record") throw masque::RecordError("this record cannot be tokenized");
    masque::Encoding e;
    for (std::size_t i = 0; i < text.size(); ++i) {
      e.ids.push_back(static_cast<unsigned char>(text[i]));
      e.pieces.push_back(std::string(1, text[i]));
      e.offsets.push_back({static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i + 1)});
      e.type_ids.push_back(0);
    }
    return e;
  }
  std::string decode(std::span<const masque::TokenId> ids, bool) const override {
    std::string out;
    for (masque::TokenId id : ids) out += static_cast<char>(id);
    return out;
  }
  std::int32_t vocab_size() const override { return 256; }
  std::string id_to_piece(masque::TokenId id) const override {
    return id >= 0 && id < 256 ? std::string(1, static_cast<char>(id)) : "";
  }
  std::optional<masque::TokenId> piece_to_id(std::string_view piece) const override {
    if (piece.size() != 1) return std::nullopt;
    return static_cast<unsigned char>(piece[0]);
  }
  const masque::SpecialTokens& special_tokens() const override { return special_; }

 private:
  masque::SpecialTokens special_;
};

// A plugin, but not the tokenizer the descriptor promises.
class NotATokenizer final : public masque::Plugin {};

masque::Plugin* create(const masque::Params& params) {
  const std::string& factory = params.get_string("factory");
  if (factory == "nothing") return nullptr;
  if (factory == "wrong-kind") return new NotATokenizer();
  if (factory == "int") throw 7;
  return new Throwing();
}

const masque::ParamSpec kParams[] = {
    {.name = "factory",
     .type = masque::ParamType::string,
     .default_value = "ok",
     .help = "ok, or how the factory misbehaves",
     .choices = "ok|nothing|wrong-kind|int"},
};

const masque::PluginDescriptor* descriptor() {
  static const masque::PluginDescriptor d{
      .kind = masque::PluginKind::tokenizer,
      .name = "test-throwing",
      .version = "0.0.1",
      .license = "MIT",
      .description = "test tokenizer that throws for some records",
      .params = kParams,
      .num_params = sizeof(kParams) / sizeof(kParams[0]),
      .create = create,
  };
  return &d;
}

}  // namespace

MASQUE_PLUGIN(descriptor)

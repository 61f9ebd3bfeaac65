// A small but real tokenizer used only by the tests: one token per Unicode code point, id =
// code point (or the line number in an optional vocabulary file). Built outside the plugin
// directory, so it is found only through MASQUE_PLUGIN_PATH.
#include <fstream>
#include <map>
#include <string>

#include "masque/error.hpp"
#include "masque/params.hpp"
#include "masque/tokenizer.hpp"

#ifndef TEST_PLUGIN_ABI_MAJOR
#define TEST_PLUGIN_ABI_MAJOR masque::kAbiMajor
#endif
#ifndef TEST_PLUGIN_NAME
#define TEST_PLUGIN_NAME "test-chars"
#endif

namespace {

class CharTokenizer final : public masque::Tokenizer {
 public:
  explicit CharTokenizer(const masque::Params& params) : upper_(params.get_bool("uppercase")) {
    const std::string& vocab = params.get_string("vocab");
    if (!vocab.empty()) {
      std::ifstream in(vocab);
      std::string line;
      while (std::getline(in, line))
        vocab_.emplace(line, static_cast<masque::TokenId>(vocab_.size()));
    }
  }

  masque::Encoding encode(std::string_view text, bool add_special) const override {
    masque::Encoding e;
    if (add_special) push(e, 1, "<s>", 0, 0);
    for (std::size_t i = 0; i < text.size();) {
      auto c = static_cast<unsigned char>(text[i]);
      std::size_t len = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
      if (i + len > text.size()) throw masque::RecordError("truncated UTF-8");
      std::string piece(text.substr(i, len));
      if (upper_ && len == 1) piece[0] = static_cast<char>(std::toupper(c));
      masque::TokenId id = 0;
      if (!vocab_.empty()) {
        auto it = vocab_.find(piece);
        id = it == vocab_.end() ? 0 : it->second;
      } else {
        id = static_cast<masque::TokenId>(decode_point(piece));
      }
      push(e, id, piece, i, i + len);
      i += len;
    }
    return e;
  }
  std::string decode(std::span<const masque::TokenId> ids, bool) const override {
    std::string out;
    for (auto id : ids) out += id_to_piece(id);
    return out;
  }
  std::int32_t vocab_size() const override {
    return vocab_.empty() ? 0x110000 : static_cast<std::int32_t>(vocab_.size());
  }
  std::string id_to_piece(masque::TokenId id) const override {
    for (const auto& [k, v] : vocab_)
      if (v == id) return k;
    return vocab_.empty() && id < 0x80 ? std::string(1, static_cast<char>(id)) : "";
  }
  std::optional<masque::TokenId> piece_to_id(std::string_view piece) const override {
    auto it = vocab_.find(std::string(piece));
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
  }
  const masque::SpecialTokens& special_tokens() const override { return special_; }

 private:
  static void push(masque::Encoding& e, masque::TokenId id, std::string piece, std::size_t b,
                   std::size_t end) {
    e.ids.push_back(id);
    e.pieces.push_back(std::move(piece));
    e.offsets.push_back({static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(end)});
    e.type_ids.push_back(0);
  }
  static std::uint32_t decode_point(const std::string& s) {
    auto c = static_cast<unsigned char>(s[0]);
    if (s.size() == 1) return c;
    std::uint32_t v = c & (0xff >> (s.size() + 1));
    for (std::size_t k = 1; k < s.size(); ++k)
      v = v << 6 | (static_cast<unsigned char>(s[k]) & 0x3f);
    return v;
  }
  bool upper_;
  std::map<std::string, masque::TokenId> vocab_;
  masque::SpecialTokens special_{.bos = 1};
};

masque::Plugin* create(const masque::Params& params) {
  return new CharTokenizer(params);
}

const masque::ParamSpec kParams[] = {
    {.name = "vocab",
     .type = masque::ParamType::path,
     .default_value = "",
     .help = "optional vocabulary, one piece per line (id = line number)"},
    {.name = "uppercase",
     .type = masque::ParamType::boolean,
     .default_value = "false",
     .help = "upper-case ASCII letters before lookup"},
    {.name = "limit",
     .type = masque::ParamType::integer,
     .default_value = "10",
     .help = "an integer with a range, for validation tests",
     .min = 1,
     .max = 100},
};

const masque::PluginDescriptor* descriptor() {
  static const masque::PluginDescriptor d{
      .abi_major = static_cast<std::uint16_t>(TEST_PLUGIN_ABI_MAJOR),
      .kind = masque::PluginKind::tokenizer,
      .name = TEST_PLUGIN_NAME,
      .version = "0.0.1",
      .license = "MIT",
      .description = "test tokenizer: one token per code point",
      .params = kParams,
      .num_params = sizeof(kParams) / sizeof(kParams[0]),
      .create = create,
  };
  return &d;
}

}  // namespace

MASQUE_PLUGIN(descriptor)

// Tokenizer `vocab`: a plain vocabulary for input that is already tokenized, tokens separated by
// single spaces (character-level models such as aren-transliteration: "آ ت ز م و ن").
//
// The vocabulary has one token per line, id = 0-based line number. Lines are split on '\n'
// only and never trimmed: tokens may be invisible format characters (U+200E, U+200C...). The
// input is split on the space character alone (tabs and other spaces belong to tokens); empty
// fields from leading, trailing or repeated spaces are skipped. A token not in the vocabulary
// becomes unk_token. decode() joins tokens with single spaces.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "masque/error.hpp"
#include "masque/params.hpp"
#include "masque/tokenizer.hpp"
#include "token_files.hpp"
#include "utf8.hpp"

namespace {

using masque::ByteSpan;
using masque::ConfigError;
using masque::Encoding;
using masque::TokenId;

class Vocabulary final : public masque::Tokenizer {
 public:
  explicit Vocabulary(const masque::Params& params) {
    const std::string& file = params.get_string("vocab");
    if (file.empty()) throw ConfigError("vocab: `vocab` (the vocabulary file) is required");
    pieces_ = masque::tok::read_token_lines(file, /*strip_cr=*/false);
    ids_ = masque::tok::index_tokens(pieces_, file);
    for (const std::string& p : pieces_)
      if (p.find(' ') != std::string::npos)
        throw ConfigError(file + ": the token " + masque::tok::quote_token(p) +
                          " contains a space, which separates tokens in the input");

    auto find = [&](const char* param, bool required) -> TokenId {
      const std::string& token = params.get_string(param);
      if (token.empty()) return -1;
      const TokenId id = ids_.find(token);
      if (id >= 0) return id;
      if (required)
        throw ConfigError(file + ": " + param + " " + masque::tok::quote_token(token) +
                          " is not in the vocabulary");
      return -1;
    };
    special_.unk = find("unk_token", true);
    special_.bos = find("bos_token", false);
    special_.eos = find("eos_token", false);
    special_.pad = find("pad_token", false);
    add_bos_ = params.get_bool("add_bos");
    add_eos_ = params.get_bool("add_eos");
    if (add_bos_ && special_.bos < 0)
      throw ConfigError(file + ": add_bos is set but bos_token '" + params.get_string("bos_token") +
                        "' is not in the vocabulary");
    if (add_eos_ && special_.eos < 0)
      throw ConfigError(file + ": add_eos is set but eos_token '" + params.get_string("eos_token") +
                        "' is not in the vocabulary");
  }

  Encoding encode(std::string_view text, bool add_special) const override {
    masque::tok::check_utf8(text, "vocab");
    Encoding out;
    if (add_special && add_bos_) push(out, special_.bos, {0, 0});
    std::size_t pos = 0;
    while (pos <= text.size()) {
      std::size_t sp = text.find(' ', pos);
      if (sp == std::string_view::npos) sp = text.size();
      if (sp > pos) {
        const std::string_view token = text.substr(pos, sp - pos);
        TokenId id = ids_.find(token);
        if (id < 0) id = special_.unk;
        if (id < 0)
          throw masque::RecordError("vocab: the token " + masque::tok::quote_token(token) +
                                    " is not in the vocabulary and unk_token is not set");
        push(out, id, {static_cast<std::uint32_t>(pos), static_cast<std::uint32_t>(sp)});
      }
      pos = sp + 1;
    }
    if (add_special && add_eos_) {
      const auto end = static_cast<std::uint32_t>(text.size());
      push(out, special_.eos, {end, end});
    }
    out.type_ids.assign(out.ids.size(), 0);
    return out;
  }

  std::string decode(std::span<const TokenId> ids, bool skip_special) const override {
    std::string out;
    for (TokenId id : ids) {
      if (id < 0 || id >= vocab_size())
        throw masque::RecordError("vocab: token id " + std::to_string(id) +
                                  " is outside the vocabulary (0.." +
                                  std::to_string(vocab_size() - 1) + ")");
      if (skip_special && is_special(id)) continue;
      if (!out.empty()) out += ' ';
      out += pieces_[id];
    }
    return out;
  }

  std::int32_t vocab_size() const override { return static_cast<std::int32_t>(pieces_.size()); }
  std::string id_to_piece(TokenId id) const override {
    return id >= 0 && id < vocab_size() ? pieces_[id] : std::string();
  }
  std::optional<TokenId> piece_to_id(std::string_view piece) const override {
    const TokenId id = ids_.find(piece);
    if (id < 0) return std::nullopt;
    return id;
  }
  const masque::SpecialTokens& special_tokens() const override { return special_; }

 private:
  void push(Encoding& out, TokenId id, ByteSpan span) const {
    out.ids.push_back(id);
    out.pieces.push_back(pieces_[id]);
    out.offsets.push_back(span);
  }

  std::vector<std::string> pieces_;
  masque::tok::TokenMap ids_;
  masque::SpecialTokens special_;
  bool add_bos_ = false, add_eos_ = false;
};

masque::Plugin* create(const masque::Params& params) {
  return new Vocabulary(params);
}

const masque::ParamSpec kParams[] = {
    {.name = "vocab",
     .type = masque::ParamType::path,
     .default_value = "",
     .help = "vocabulary file: one token per line, id = 0-based line number (split on '\\n' "
             "only, never trimmed)",
     .flags = masque::kParamRequired},
    {.name = "unk_token",
     .type = masque::ParamType::string,
     .default_value = "<unk>",
     .help = "token that stands for input tokens missing from the vocabulary (must be in it); "
             "empty: an unknown token is an error for that record"},
    {.name = "bos_token",
     .type = masque::ParamType::string,
     .default_value = "<s>",
     .help = "beginning-of-sequence token (added by add_bos; a decoder's start token)"},
    {.name = "eos_token",
     .type = masque::ParamType::string,
     .default_value = "</s>",
     .help = "end-of-sequence token (added by add_eos; a decoder's stop token)"},
    {.name = "pad_token",
     .type = masque::ParamType::string,
     .default_value = "<blank>",
     .help = "padding token"},
    {.name = "add_bos",
     .type = masque::ParamType::boolean,
     .default_value = "false",
     .help = "put bos_token before the tokens when special tokens are added"},
    {.name = "add_eos",
     .type = masque::ParamType::boolean,
     .default_value = "false",
     .help = "put eos_token after the tokens when special tokens are added"},
};

// A folder with separate source and target vocabularies, one token per line, as OpenNMT and
// CTranslate2 write them: the target's only beside a source's. Any other tokenizer file wins.
const masque::TokenizerFolderFiles kReads[] = {
    {.files = "source_vocab.txt", .param = "vocab", .names_file = true},
    {.files = "target_vocab.txt",
     .param = "vocab",
     .names_file = true,
     .section = "target_tokenizer"}};
const masque::TokenizerTraits kTraits{.reads = kReads, .num_reads = 2, .preference = 0};

const masque::PluginDescriptor* descriptor() {
  static const masque::PluginDescriptor d{
      .kind = masque::PluginKind::tokenizer,
      .name = "vocab",
      .version = "1.0.0",
      .license = "MIT",
      .description =
          "one token per line vocabulary over space-separated input (character-level "
          "models)",
      .params = kParams,
      .num_params = sizeof(kParams) / sizeof(kParams[0]),
      .create = create,
      .tokenizer = &kTraits,
  };
  return &d;
}

}  // namespace

MASQUE_PLUGIN(descriptor)

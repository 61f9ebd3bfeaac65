// Tokenizer `sentencepiece`: a SentencePiece model (tokenizer.model of Llama-style models),
// run by Debian's libsentencepiece, so ids are exactly those of `spm_encode`.
//
// add_special puts BOS (and EOS) around the text as the folder's tokenizer_config.json says
// (add_bos_token / add_eos_token, as Hugging Face's LlamaTokenizer reads them); without that
// file, BOS only. Offsets are SentencePiece's own byte spans of each piece in the input (a
// dummy-prefix "▁" that stands for no input byte has an empty span). When byte fallback spells
// one character as several byte pieces, SentencePiece gives the whole character to the last of
// them; here each byte piece gets its own input byte instead when the character was taken over
// unchanged (identity normalization), so text[span] is the byte the piece stands for.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <sentencepiece_processor.h>
#include <nlohmann/json.hpp>

#include "hf_folder_traits.hpp"
#include "json_file.hpp"
#include "masque/error.hpp"
#include "masque/params.hpp"
#include "masque/tokenizer.hpp"
#include "token_files.hpp"
#include "utf8.hpp"

namespace {

namespace fs = std::filesystem;
using masque::ByteSpan;
using masque::ConfigError;
using masque::Encoding;
using masque::TokenId;
using masque::tok::Tristate;

// The value of a byte piece "<0xAB>", or -1.
int byte_piece_value(const std::string& piece) {
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -100;
  };
  const int v = hex(piece[3]) * 16 + hex(piece[4]);
  return v >= 0 ? v : -1;
}

class SentencePiece final : public masque::Tokenizer {
 public:
  explicit SentencePiece(const masque::Params& params) {
    const std::string& folder = params.get_string("path");
    std::string model = params.get_string("model");
    if (model.empty()) {
      if (folder.empty())
        throw ConfigError("sentencepiece: set `path` (a folder with tokenizer.model) or `model`");
      model = (fs::path(folder) / "tokenizer.model").string();
      if (!fs::exists(model))
        throw ConfigError("sentencepiece: " + folder + " has no tokenizer.model (set `model`)");
    }
    const auto status = sp_.Load(model);
    if (!status.ok())
      throw ConfigError(model + ": not a SentencePiece model: " + status.ToString());

    special_.unk = sp_.unk_id();
    special_.bos = sp_.bos_id();
    special_.eos = sp_.eos_id();
    special_.pad = sp_.pad_id();

    // BOS/EOS defaults from tokenizer_config.json next to the model (or in `path`).
    bool cfg_bos = true, cfg_eos = false;
    const fs::path cfg_file = (folder.empty() ? fs::path(model).parent_path() : fs::path(folder)) /
                              "tokenizer_config.json";
    if (fs::exists(cfg_file)) {
      const nlohmann::json cfg =
          masque::tok::read_json_file(cfg_file.string(), "tokenizer configuration");
      if (!cfg.is_object())
        throw ConfigError(cfg_file.string() + ": expected a JSON object, got " +
                          std::string(cfg.type_name()));
      // A value of another type would otherwise be ignored and the default used silently.
      auto flag = [&](const char* key, bool& out) {
        const auto it = cfg.find(key);
        if (it == cfg.end() || it->is_null()) return;
        if (!it->is_boolean())
          throw ConfigError(cfg_file.string() + ": " + key + ": expected true or false, got " +
                            it->dump());
        out = it->get<bool>();
      };
      flag("add_bos_token", cfg_bos);
      flag("add_eos_token", cfg_eos);
    }
    auto pick = [](const std::string& v, bool fallback) {
      const Tristate t = masque::tok::parse_tristate(v);
      return t == Tristate::automatic ? fallback : t == Tristate::yes;
    };
    add_bos_ = pick(params.get_string("add_bos"), cfg_bos);
    add_eos_ = pick(params.get_string("add_eos"), cfg_eos);
    if (add_bos_ && special_.bos < 0)
      throw ConfigError(model + ": add_bos is set but the model has no BOS");
    if (add_eos_ && special_.eos < 0)
      throw ConfigError(model + ": add_eos is set but the model has no EOS");

    pieces_.resize(static_cast<std::size_t>(sp_.GetPieceSize()));
    byte_value_.resize(pieces_.size(), -1);
    for (std::size_t id = 0; id < pieces_.size(); ++id) {
      pieces_[id] = sp_.IdToPiece(static_cast<int>(id));
      if (sp_.IsByte(static_cast<int>(id))) byte_value_[id] = byte_piece_value(pieces_[id]);
    }
  }

  Encoding encode(std::string_view text, bool add_special) const override {
    masque::tok::check_utf8(text, "sentencepiece");
    sentencepiece::ImmutableSentencePieceText spt;
    const auto status = sp_.Encode(text, spt.mutable_proto());
    if (!status.ok()) throw masque::RecordError("sentencepiece: " + status.ToString());
    Encoding out;
    const std::size_t n = spt.pieces_size();
    out.ids.reserve(n + 2);
    if (add_special && add_bos_) push(out, special_.bos, {0, 0});
    for (std::size_t k = 0; k < n;) {
      const auto piece = spt.pieces(static_cast<int>(k));
      const auto id = static_cast<TokenId>(piece.id());
      ByteSpan span{piece.begin(), piece.end()};
      if (byte_value_[id] < 0) {
        push(out, id, span);
        ++k;
        continue;
      }
      // A run of byte pieces ends with the one that carries the character's span.
      std::size_t last = k;
      while (last + 1 < n &&
             spt.pieces(static_cast<int>(last)).begin() ==
                 spt.pieces(static_cast<int>(last)).end() &&
             byte_value_[spt.pieces(static_cast<int>(last + 1)).id()] >= 0)
        ++last;
      const auto tail = spt.pieces(static_cast<int>(last));
      const std::size_t count = last - k + 1;
      const std::uint32_t b = tail.begin(), e = tail.end();
      bool verbatim = e - b == count && e <= text.size();
      for (std::size_t i = 0; verbatim && i < count; ++i)
        verbatim = static_cast<unsigned char>(text[b + i]) ==
                   byte_value_[spt.pieces(static_cast<int>(k + i)).id()];
      for (std::size_t i = 0; i < count; ++i) {
        const auto p = spt.pieces(static_cast<int>(k + i));
        const ByteSpan s = verbatim ? ByteSpan{static_cast<std::uint32_t>(b + i),
                                               static_cast<std::uint32_t>(b + i + 1)}
                                    : ByteSpan{p.begin(), p.end()};
        push(out, static_cast<TokenId>(p.id()), s);
      }
      k = last + 1;
    }
    if (add_special && add_eos_) {
      const auto end = static_cast<std::uint32_t>(text.size());
      push(out, special_.eos, {end, end});
    }
    out.type_ids.assign(out.ids.size(), 0);
    return out;
  }

  std::string decode(std::span<const TokenId> ids, bool skip_special) const override {
    std::vector<int> kept;
    kept.reserve(ids.size());
    for (TokenId id : ids) {
      if (id < 0 || id >= vocab_size())
        throw masque::RecordError("sentencepiece: token id " + std::to_string(id) +
                                  " is outside the vocabulary (0.." +
                                  std::to_string(vocab_size() - 1) + ")");
      if (skip_special && is_special(id)) continue;
      kept.push_back(id);
    }
    std::string text;
    const auto status = sp_.Decode(kept, &text);
    if (!status.ok()) throw masque::RecordError("sentencepiece: " + status.ToString());
    return text;
  }

  std::int32_t vocab_size() const override { return static_cast<std::int32_t>(pieces_.size()); }
  std::string id_to_piece(TokenId id) const override {
    return id >= 0 && id < vocab_size() ? pieces_[id] : std::string();
  }
  std::optional<TokenId> piece_to_id(std::string_view piece) const override {
    const int id = sp_.PieceToId(piece);
    if (id < 0 || id >= vocab_size() || pieces_[id] != piece) return std::nullopt;
    return id;
  }
  const masque::SpecialTokens& special_tokens() const override { return special_; }
  // BOS/EOS/PAD/UNK and every other control piece of the model.
  bool is_special(TokenId id) const override {
    return Tokenizer::is_special(id) || (id >= 0 && id < vocab_size() && sp_.IsControl(id));
  }

 private:
  void push(Encoding& out, TokenId id, ByteSpan span) const {
    out.ids.push_back(id);
    out.pieces.push_back(pieces_[id]);
    out.offsets.push_back(span);
  }

  sentencepiece::SentencePieceProcessor sp_;
  std::vector<std::string> pieces_;
  std::vector<int> byte_value_;  // byte of each "<0xAB>" piece, else -1
  masque::SpecialTokens special_;
  bool add_bos_ = true, add_eos_ = false;
};

masque::Plugin* create(const masque::Params& params) {
  return new SentencePiece(params);
}

const masque::ParamSpec kParams[] = {
    {.name = "path",
     .type = masque::ParamType::path,
     .default_value = "",
     .help = "model folder with tokenizer.model, and tokenizer_config.json if present (its "
             "add_bos_token / add_eos_token decide BOS/EOS when add_bos/add_eos are auto)"},
    {.name = "model",
     .type = masque::ParamType::path,
     .default_value = "",
     .help = "SentencePiece model file to use instead of path/tokenizer.model (then "
             "tokenizer_config.json is looked for in path, or else next to this file)"},
    {.name = "add_bos",
     .type = masque::ParamType::string,
     .default_value = "auto",
     .help = "put the model's BOS before the text when special tokens are added; auto = "
             "add_bos_token of tokenizer_config.json, or true without that file",
     .choices = "auto|true|false"},
    {.name = "add_eos",
     .type = masque::ParamType::string,
     .default_value = "auto",
     .help = "put the model's EOS after the text when special tokens are added; auto = "
             "add_eos_token of tokenizer_config.json, or false without that file",
     .choices = "auto|true|false"},
};

// A folder's tokenizer.model; a folder's tokenizer.json, when it has both, says more.
const masque::TokenizerFolderFiles kReads[] = {{.files = "tokenizer.model"}};
const masque::TokenizerTraits kTraits = masque::tok::hf_folder_traits(kReads, 30);

const masque::PluginDescriptor* descriptor() {
  static const masque::PluginDescriptor d{
      .kind = masque::PluginKind::tokenizer,
      .name = "sentencepiece",
      .version = "1.0.0",
      .license = "MIT",
      .description = "SentencePiece model (tokenizer.model) through libsentencepiece",
      .params = kParams,
      .num_params = sizeof(kParams) / sizeof(kParams[0]),
      .create = create,
      .tokenizer = &kTraits,
  };
  return &d;
}

}  // namespace

MASQUE_PLUGIN(descriptor)

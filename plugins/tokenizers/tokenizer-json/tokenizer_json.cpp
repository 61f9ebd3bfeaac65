// Tokenizer `tokenizer-json`: a Hugging Face tokenizer.json (the "fast tokenizer" file of
// Llama 3, Qwen, DeepSeek, Gemma, Phi-3, Mistral, T5, BERT ... folders), run exactly as Hugging
// Face tokenizers (Rust) runs it:
//
//   added tokens split out (added_vocabulary) -> normalizer -> pre-tokenizer -> model
//   -> post-processor (special tokens of add_special, pair type ids, offset trimming)
//
// and decode() = the decoder chain over the tokens' strings (no clean-up of spaces: that is a
// Python transformers step). Each stage is one file pair in this folder.
//
// Offsets: byte spans into the text given to encode(). Every normalized byte remembers the input
// span it came from, so a token spans the input it was made of ("▁Hello" spans "Hello" or
// " Hello"; a dummy-prefix "▁" alone has an empty span). Byte-level tokens span exactly their
// bytes; ByteLevel's trim_offsets leaves the leading space out, as Hugging Face does. Special
// tokens added by add_special have empty spans where they stand.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "added_vocabulary.hpp"
#include "byte_level.hpp"
#include "decoders.hpp"
#include "hf_folder_traits.hpp"
#include "json_file.hpp"
#include "json_node.hpp"
#include "masque/error.hpp"
#include "masque/params.hpp"
#include "masque/tokenizer.hpp"
#include "models.hpp"
#include "normalizers.hpp"
#include "post_processors.hpp"
#include "pre_tokenizers.hpp"
#include "utf8.hpp"

namespace {

namespace fs = std::filesystem;
using masque::ByteSpan;
using masque::ConfigError;
using masque::Encoding;
using masque::TokenId;
using namespace masque::hfjson;

// The tokenizer.json named by `path`: the file itself, or the one in the folder.
std::string locate(const std::string& path) {
  if (path.empty())
    throw ConfigError(
        "tokenizer-json: set `path` (a model folder with tokenizer.json, or the file)");
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path file = fs::path(path) / "tokenizer.json";
    if (!fs::exists(file, ec)) {
      // The files the sibling plugins read (as they declare them), for a hint.
      auto has = [&](const char* name) { return fs::is_regular_file(fs::path(path) / name, ec); };
      std::string hint;
      if (has("tokenizer.model"))
        hint = " (it has tokenizer.model: use the sentencepiece tokenizer)";
      else if (has("vocab.json") && has("merges.txt"))
        hint = " (it has vocab.json and merges.txt: use the bpe tokenizer)";
      else if (has("vocab.txt"))
        hint = " (it has vocab.txt: use the wordpiece tokenizer)";
      throw ConfigError("tokenizer-json: " + path + " has no tokenizer.json" + hint);
    }
    return file.string();
  }
  return path;
}

class TokenizerJson final : public masque::Tokenizer {
 public:
  explicit TokenizerJson(const masque::Params& params) {
    file_ = locate(params.get_string("path"));
    const TokenizerFile file = read_tokenizer_json(file_);
    const Node root(file.root, file_, "$");
    normalizer_ = make_normalizer(root.get("normalizer"));
    pre_tokenizer_ = make_pre_tokenizer(root.get("pre_tokenizer"));
    byte_level_ = pre_tokenizer_ && pre_tokenizer_->byte_level();
    model_ = make_model(root.at("model"), file.tables, byte_level_);
    added_ = std::make_unique<AddedVocabulary>(root.get("added_tokens"), normalizer_.get());
    post_processor_ = make_post_processor(root.get("post_processor"));
    decoder_ = make_decoder(root.get("decoder"));
    build_pieces();
    read_special_tokens();
    check_post_processor_ids();
  }

  Encoding encode(std::string_view text, bool add_special) const override {
    masque::tok::check_utf8(text, "tokenizer-json");
    Encoding e = encode_text(text);
    if (post_processor_) post_processor_->process(e, nullptr, add_special);
    return e;
  }

  Encoding encode_pair(std::string_view first, std::string_view second,
                       bool add_special) const override {
    masque::tok::check_utf8(first, "tokenizer-json");
    masque::tok::check_utf8(second, "tokenizer-json");
    Encoding a = encode_text(first), b = encode_text(second);
    if (!post_processor_ || !post_processor_->process(a, &b, add_special)) join_pair(a, b);
    return a;
  }

  std::string decode(std::span<const TokenId> ids, bool skip_special) const override {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (TokenId id : ids) {
      if (id < 0 || id >= vocab_size())
        throw masque::RecordError("tokenizer-json: token id " + std::to_string(id) +
                                  " is outside the vocabulary (0.." +
                                  std::to_string(vocab_size() - 1) + ")");
      if (skip_special && added_->is_special(id)) continue;
      const std::string& p = pieces_[id];
      if (p.empty()) continue;  // an id no token has: Hugging Face skips it
      tokens.push_back(p);
    }
    if (!decoder_) {
      std::string out;
      for (std::size_t k = 0; k < tokens.size(); ++k) out += (k ? " " : "") + tokens[k];
      return out;
    }
    decoder_->decode_chain(tokens);
    std::string out;
    for (const std::string& t : tokens) out += t;
    return out;
  }

  std::int32_t vocab_size() const override { return static_cast<std::int32_t>(pieces_.size()); }
  std::string id_to_piece(TokenId id) const override {
    return id >= 0 && id < vocab_size() ? pieces_[id] : std::string();
  }
  std::optional<TokenId> piece_to_id(std::string_view piece) const override {
    TokenId id = added_->find(piece);
    if (id < 0) id = model_->find(piece);
    if (id < 0) return std::nullopt;
    return id;
  }
  const masque::SpecialTokens& special_tokens() const override { return special_; }
  bool is_special(TokenId id) const override {
    return added_->is_special(id) || Tokenizer::is_special(id);
  }

 private:
  // The tokens of one text before post-processing.
  Encoding encode_text(std::string_view text) const {
    Encoding out;
    out.ids.reserve(text.size() / 3 + 4);
    out.offsets.reserve(text.size() / 3 + 4);
    out.pieces.reserve(text.size() / 3 + 4);
    std::vector<Segment> segments;
    added_->extract(text, segments);
    std::vector<Normalized> pieces;
    std::vector<PieceToken> tokens;
    for (Segment& seg : segments) {
      if (seg.added >= 0) {
        push(out, seg.added, seg.text.original(0, seg.text.text.size()));
        continue;
      }
      if (seg.text.empty()) continue;
      pieces.clear();
      pieces.push_back(std::move(seg.text));
      if (pre_tokenizer_) pre_tokenizer_->split(pieces);
      for (const Normalized& p : pieces) {
        if (p.empty()) continue;
        tokens.clear();
        tokenize_piece(p.text, tokens);
        for (const PieceToken& t : tokens) push(out, t.id, p.original(t.begin, t.end));
      }
    }
    out.type_ids.assign(out.ids.size(), 0);
    return out;
  }

  void tokenize_piece(const std::string& piece, std::vector<PieceToken>& tokens) const {
    if (!byte_level_ || model_->reads_raw_bytes()) {
      model_->tokenize(piece, tokens);
      return;
    }
    // A model other than BPE under ByteLevel reads the piece in the byte alphabet; its offsets
    // (bytes of the spelled piece) map back to raw bytes, one per alphabet character.
    const std::string spelled = masque::tok::bytes_to_alphabet(piece);
    std::vector<std::uint32_t> raw_at(spelled.size() + 1, 0);
    std::uint32_t k = 0;
    for (std::size_t i = 0; i < spelled.size(); ++i) {
      if ((static_cast<unsigned char>(spelled[i]) & 0xC0) != 0x80 && i > 0) ++k;
      raw_at[i] = k;
    }
    raw_at[spelled.size()] = static_cast<std::uint32_t>(piece.size());
    const std::size_t first = tokens.size();
    model_->tokenize(spelled, tokens);
    for (std::size_t t = first; t < tokens.size(); ++t) {
      tokens[t].begin = raw_at[tokens[t].begin];
      tokens[t].end = tokens[t].end >= spelled.size() ? static_cast<std::uint32_t>(piece.size())
                                                      : raw_at[tokens[t].end];
    }
  }

  void push(Encoding& out, TokenId id, ByteSpan span) const {
    out.ids.push_back(id);
    out.pieces.push_back(pieces_[id]);
    out.offsets.push_back(span);
  }

  // id -> piece: the added token's content, else the model's entry.
  void build_pieces() {
    std::int32_t size = model_->size();
    for (const AddedToken& a : added_->tokens()) size = std::max(size, a.id + 1);
    pieces_.resize(static_cast<std::size_t>(size));
    for (TokenId id = 0; id < model_->size(); ++id) pieces_[id] = model_->piece(id);
    for (const AddedToken& a : added_->tokens()) pieces_[a.id] = a.content;
  }

  // The special tokens the post-processor adds (to one text and to a pair) must be in the
  // vocabulary: an id past it would reach the model as an out-of-range input.
  void check_post_processor_ids() const {
    if (!post_processor_) return;
    Encoding single, first, second;
    post_processor_->process(single, nullptr, true);
    if (!post_processor_->process(first, &second, true)) join_pair(first, second);
    for (const Encoding* e : {&single, &first})
      for (TokenId id : e->ids)
        if (id < 0 || id >= vocab_size())
          throw masque::ConfigError(file_ + ": $.post_processor: special token id " +
                                    std::to_string(id) + " is outside the vocabulary (" +
                                    std::to_string(vocab_size()) + " tokens)");
  }

  // Which ids are BOS, EOS, ...: tokenizer_config.json next to tokenizer.json names them
  // (Hugging Face keeps them there); the model's unk token otherwise.
  void read_special_tokens() {
    special_.unk = model_->unk();
    const fs::path cfg = fs::path(file_).parent_path() / "tokenizer_config.json";
    std::error_code ec;
    if (!fs::exists(cfg, ec)) return;
    const json c = masque::tok::read_json_file(cfg.string(), "tokenizer configuration");
    if (!c.is_object()) return;
    auto id_of = [&](const char* key, TokenId& slot) {
      auto it = c.find(key);
      if (it == c.end()) return;
      std::string content;
      if (it->is_string())
        content = it->get<std::string>();
      else if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
        content = (*it)["content"].get<std::string>();
      if (content.empty()) return;
      if (auto id = piece_to_id(content)) slot = *id;
    };
    id_of("bos_token", special_.bos);
    id_of("eos_token", special_.eos);
    id_of("pad_token", special_.pad);
    id_of("unk_token", special_.unk);
    id_of("mask_token", special_.mask);
    id_of("cls_token", special_.cls);
    id_of("sep_token", special_.sep);
  }

  std::string file_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<AddedVocabulary> added_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  std::vector<std::string> pieces_;
  bool byte_level_ = false;
  masque::SpecialTokens special_;
};

masque::Plugin* create(const masque::Params& params) {
  return new TokenizerJson(params);
}

const masque::ParamSpec kParams[] = {
    {.name = "path",
     .type = masque::ParamType::path,
     .default_value = "",
     .help = "a model folder with tokenizer.json (Hugging Face's fast-tokenizer file), or the "
             "file itself; tokenizer_config.json next to it names BOS/EOS/PAD. When a folder "
             "has several tokenizer files, masque reads them in this order: tokenizer.json "
             "(tokenizer-json), tokenizer.model (sentencepiece), vocab.json + merges.txt (bpe), "
             "vocab.txt (wordpiece)"},
};

// A folder's tokenizer.json, preferred to every other file as Hugging Face's AutoTokenizer
// prefers it: it alone carries the normalizer, added tokens and post-processor.
const masque::TokenizerFolderFiles kReads[] = {{.files = "tokenizer.json"}};
const masque::TokenizerTraits kTraits = masque::tok::hf_folder_traits(kReads, 40);

const masque::PluginDescriptor* descriptor() {
  static const masque::PluginDescriptor d{
      .kind = masque::PluginKind::tokenizer,
      .name = "tokenizer-json",
      .version = "1.0.0",
      .license = "MIT",
      .description = "Hugging Face tokenizer.json (BPE, Unigram, WordPiece, WordLevel), exact",
      .params = kParams,
      .num_params = sizeof(kParams) / sizeof(kParams[0]),
      .create = create,
      .tokenizer = &kTraits,
  };
  return &d;
}

}  // namespace

MASQUE_PLUGIN(descriptor)

// Tokenizer `bpe`: GPT-2's byte-level BPE (OpenAI encoder.json/vocab.bpe = Hugging Face
// vocab.json/merges.txt), giving the same ids as Hugging Face tokenizers and tiktoken.
//
// encode: `<|endoftext|>` written in the text is that special token (as Hugging Face does;
// split_special: false turns this off, like tiktoken's encode_ordinary); the rest is cut by the
// GPT-2 pre-tokenizer (pretokenizer.hpp), and each piece's UTF-8 bytes are merged pair by pair,
// lowest merge rank first (leftmost on a tie). Pieces seen before come from a cache.
//
// Offsets: byte-level tokens cover whole input bytes and never overlap, so a token's span is
// exactly the bytes it encodes; text[span] == the token's bytes. A multi-byte character split
// across tokens (e.g. an emoji as 3 + 1 bytes) gives spans that end or start inside it.
// decode() concatenates the tokens' bytes: decode(encode(x).ids) == x byte for byte.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <queue>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "bpe_merges.hpp"
#include "byte_level.hpp"
#include "hf_folder_traits.hpp"
#include "json_file.hpp"
#include "masque/error.hpp"
#include "masque/params.hpp"
#include "masque/tokenizer.hpp"
#include "piece_cache.hpp"
#include "pretokenizer.hpp"
#include "token_files.hpp"
#include "utf8.hpp"

namespace {

namespace fs = std::filesystem;
using masque::ByteSpan;
using masque::ConfigError;
using masque::Encoding;
using masque::TokenId;

constexpr const char* kEndOfText = "<|endoftext|>";

class BytePairEncoder final : public masque::Tokenizer {
 public:
  explicit BytePairEncoder(const masque::Params& params) {
    const std::string& folder = params.get_string("path");
    std::string vocab_file = params.get_string("vocab");
    std::string merges_file = params.get_string("merges");
    if (vocab_file.empty() || merges_file.empty()) {
      if (folder.empty())
        throw ConfigError(
            "bpe: set `path` (a folder with vocab.json and merges.txt) or both "
            "`vocab` and `merges`");
      if (vocab_file.empty()) vocab_file = (fs::path(folder) / "vocab.json").string();
      if (merges_file.empty()) merges_file = (fs::path(folder) / "merges.txt").string();
    }
    load_vocab(vocab_file);
    load_merges(merges_file);
    add_bos_ = params.get_bool("add_bos");
    if (add_bos_ && special_.bos < 0)
      throw ConfigError("bpe: add_bos is set but " + vocab_file + " has no " + kEndOfText);
    if (params.get_bool("split_special") && special_.eos >= 0)
      specials_in_text_.add(kEndOfText, special_.eos);
    build_whole_piece_table();
  }

  Encoding encode(std::string_view text, bool add_special) const override {
    masque::tok::check_utf8(text, "bpe");
    Encoding out;
    out.ids.reserve(text.size() / 3 + 2);
    out.offsets.reserve(text.size() / 3 + 2);
    out.pieces.reserve(text.size() / 3 + 2);
    if (add_special && add_bos_) push(out, special_.bos, {0, 0});
    std::vector<masque::bpe::Piece> pieces;
    std::vector<std::uint64_t> hashes;
    std::vector<TokenId> ids;
    specials_in_text_.split(
        text,
        [&](std::size_t b, std::size_t e) {
          pieces.clear();
          masque::bpe::split_gpt2(text.substr(b, e - b), pieces);
          // Hash every piece first and prefetch the table slots a few pieces ahead: the
          // lookups are random accesses into tables larger than the L2 cache.
          hashes.resize(pieces.size());
          for (std::size_t k = 0; k < pieces.size(); ++k)
            hashes[k] = masque::tok::hash_bytes(
                text.substr(b + pieces[k].first, pieces[k].second - pieces[k].first));
          constexpr std::size_t kAhead = 4;
          for (std::size_t k = 0; k < std::min(kAhead, pieces.size()); ++k) prefetch(hashes[k]);
          for (std::size_t k = 0; k < pieces.size(); ++k) {
            if (k + kAhead < pieces.size()) prefetch(hashes[k + kAhead]);
            const auto [pb, pe] = pieces[k];
            encode_piece(text.substr(b + pb, pe - pb), hashes[k], ids);
            auto at = static_cast<std::uint32_t>(b + pb);
            for (TokenId id : ids) {
              const std::uint32_t len = byte_len_[id];
              push(out, id, {at, at + len});
              at += len;
            }
          }
        },
        [&](std::size_t b, std::size_t e, TokenId id) {
          push(out, id, {static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(e)});
        });
    out.type_ids.assign(out.ids.size(), 0);
    return out;
  }

  std::string decode(std::span<const TokenId> ids, bool skip_special) const override {
    std::string out;
    for (TokenId id : ids) {
      if (id < 0 || id >= vocab_size() || pieces_[id].empty())
        throw masque::RecordError("bpe: token id " + std::to_string(id) +
                                  " is not in the vocabulary");
      if (skip_special && is_special(id)) continue;
      out += bytes_[id];
    }
    return out;
  }

  std::int32_t vocab_size() const override { return static_cast<std::int32_t>(pieces_.size()); }
  std::string id_to_piece(TokenId id) const override {
    return id >= 0 && id < vocab_size() ? pieces_[id] : std::string();
  }
  std::optional<TokenId> piece_to_id(std::string_view piece) const override {
    const TokenId id = piece_ids_.find(piece);
    if (id < 0) return std::nullopt;
    return id;
  }
  const masque::SpecialTokens& special_tokens() const override { return special_; }

 private:
  void push(Encoding& out, TokenId id, ByteSpan span) const {
    out.ids.push_back(id);
    out.pieces.emplace_back(piece_view(id));
    out.offsets.push_back(span);
  }

  // The vocab.json spelling of a token (all of them in one arena, for locality).
  std::string_view piece_view(TokenId id) const {
    return std::string_view(piece_arena_)
        .substr(piece_offset_[id], piece_offset_[id + 1] - piece_offset_[id]);
  }

  void load_vocab(const std::string& file) {
    const nlohmann::json j = masque::tok::read_json_file(file, "BPE vocabulary");
    if (!j.is_object() || j.empty())
      throw ConfigError(file + ": expected a non-empty JSON object {\"token\": id, ...}");
    std::int64_t max_id = -1;
    for (const auto& [token, value] : j.items()) {
      if (!value.is_number_integer() || value.get<std::int64_t>() < 0 ||
          value.get<std::int64_t>() > (1 << 30))
        throw ConfigError(file + ": the id of " + masque::tok::quote_token(token) +
                          " is not an integer in 0..2^30");
      max_id = std::max(max_id, value.get<std::int64_t>());
    }
    // Ids index tables sized by the largest one: a few gaps are fine, a lone huge id is not.
    const auto count = static_cast<std::int64_t>(j.size());
    if (max_id >= 2 * count + 256)
      throw ConfigError(file + ": the largest id is " + std::to_string(max_id) +
                        " but there are only " + std::to_string(count) +
                        " tokens (ids should number them 0.." + std::to_string(count - 1) + ")");
    pieces_.assign(static_cast<std::size_t>(max_id + 1), std::string());
    bytes_.assign(pieces_.size(), std::string());
    std::array<int, 0x200> unicode_to_byte;
    unicode_to_byte.fill(-1);
    const auto b2u = masque::tok::bytes_to_unicode();
    for (int b = 0; b < 256; ++b) unicode_to_byte[b2u[b]] = b;
    for (const auto& [token, value] : j.items()) {
      const auto id = value.get<TokenId>();
      if (!pieces_[id].empty())
        throw ConfigError(file + ": id " + std::to_string(id) + " is given to both " +
                          masque::tok::quote_token(pieces_[id]) + " and " +
                          masque::tok::quote_token(token));
      if (token.empty()) throw ConfigError(file + ": the empty string is not a valid token");
      pieces_[id] = token;
      piece_ids_.insert(token, id);
      // The raw bytes the token stands for (tokens outside the byte alphabet, such as a
      // special token with other characters, stand for their own UTF-8).
      std::string raw;
      bool mapped = true;
      for (std::size_t i = 0; i < token.size() && mapped;) {
        char32_t cp = 0;
        const int len = masque::tok::decode_utf8(token, i, cp);
        if (len == 0 || cp >= unicode_to_byte.size() || unicode_to_byte[cp] < 0)
          mapped = false;
        else
          raw.push_back(static_cast<char>(unicode_to_byte[cp]));
        i += static_cast<std::size_t>(len == 0 ? 1 : len);
      }
      bytes_[id] = mapped ? raw : token;
    }
    for (int b = 0; b < 256; ++b) {
      std::string one;
      masque::tok::append_utf8(one, b2u[b]);
      byte_token_[b] = piece_ids_.find(one);
      if (byte_token_[b] < 0)
        throw ConfigError(file + ": the byte-level vocabulary lacks the token " +
                          masque::tok::quote_token(one) + " for byte " + std::to_string(b));
    }
    if (const TokenId eot = piece_ids_.find(kEndOfText); eot >= 0) {
      special_.bos = special_.eos = eot;
      bytes_[eot] = kEndOfText;
    }
    // Compact copies for the encode loop: spellings in one arena, byte lengths as 16 bits.
    piece_offset_.push_back(0);
    for (std::size_t id = 0; id < pieces_.size(); ++id) {
      piece_arena_ += pieces_[id];
      piece_offset_.push_back(static_cast<std::uint32_t>(piece_arena_.size()));
      if (bytes_[id].size() > 0xFFFF)
        throw ConfigError(file + ": the token " + masque::tok::quote_token(pieces_[id]) +
                          " is too long");
      byte_len_.push_back(static_cast<std::uint16_t>(bytes_[id].size()));
    }
  }

  void load_merges(const std::string& file) {
    const std::string data = masque::tok::read_whole_file(file, "BPE merges file");
    std::vector<std::string_view> lines;
    for (std::size_t pos = 0; pos < data.size();) {
      std::size_t nl = data.find('\n', pos);
      if (nl == std::string::npos) nl = data.size();
      std::string_view line(data.data() + pos, nl - pos);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      lines.push_back(line);
      pos = nl + 1;
    }
    merges_.reserve(lines.size());
    std::uint32_t rank = 0;
    for (std::size_t i = 0; i < lines.size(); ++i) {
      const std::string_view line = lines[i];
      const std::string where = file + ":" + std::to_string(i + 1);
      if (i == 0 && line.substr(0, 8) == "#version") continue;
      std::vector<std::string_view> fields;
      for (std::size_t p = 0;;) {
        const std::size_t sp = line.find(' ', p);
        fields.push_back(line.substr(p, sp == std::string_view::npos ? line.npos : sp - p));
        if (sp == std::string_view::npos) break;
        p = sp + 1;
      }
      if (fields.size() != 2 || fields[0].empty() || fields[1].empty())
        throw ConfigError(where +
                          ": expected a merge 'A B' (two tokens separated by one space), "
                          "got " +
                          std::to_string(line.empty() ? 0 : fields.size()) + " field(s)");
      const std::string joined = std::string(fields[0]) + std::string(fields[1]);
      const TokenId a = piece_ids_.find(fields[0]), b = piece_ids_.find(fields[1]),
                    m = piece_ids_.find(joined);
      for (auto [id, name] : {std::pair{a, fields[0]}, std::pair{b, fields[1]},
                              std::pair{m, std::string_view(joined)}})
        if (id < 0)
          throw ConfigError(where + ": the token " + masque::tok::quote_token(name) +
                            " is not in the vocabulary");
      if (!merges_.insert(a, b, rank, m))
        throw ConfigError(where + ": the merge '" + std::string(line) + "' appears twice");
      ++rank;
    }
    if (rank == 0) throw ConfigError(file + ": the merges file has no merges");
  }

  // The pieces whose BPE result is the single token of the same bytes: looked up without the
  // lock of the cache (most frequent words are one token).
  void build_whole_piece_table() {
    std::vector<TokenId> ids;
    for (std::size_t id = 0; id < bytes_.size(); ++id) {
      const std::string& raw = bytes_[id];
      if (raw.empty() || static_cast<TokenId>(id) == special_.eos) continue;
      bpe(raw, ids);
      if (ids.size() == 1 && ids[0] == static_cast<TokenId>(id)) whole_.insert(raw, ids[0]);
    }
  }

  void prefetch(std::uint64_t h) const {
    whole_.prefetch(h);
    cache_.prefetch(h);
  }

  // `h` is hash_bytes(piece).
  void encode_piece(std::string_view piece, std::uint64_t h, std::vector<TokenId>& ids) const {
    ids.clear();
    if (piece.size() == 1) {
      ids.push_back(byte_token_[static_cast<unsigned char>(piece[0])]);
      return;
    }
    if (const TokenId id = whole_.find(piece, h); id >= 0) {
      ids.push_back(id);
      return;
    }
    const bool cacheable = piece.size() <= masque::tok::PieceCache::kMaxPieceBytes;
    if (cacheable && cache_.find(piece, h, ids)) return;
    bpe(piece, ids);
    if (cacheable) cache_.insert(piece, h, ids);
  }

  // Merges the bytes of one piece (bpe_merges.hpp).
  void bpe(std::string_view piece, std::vector<TokenId>& ids) const {
    ids.resize(piece.size());
    for (std::size_t i = 0; i < piece.size(); ++i)
      ids[i] = byte_token_[static_cast<unsigned char>(piece[i])];
    masque::tok::merge_symbols(merges_, ids);
  }

  std::vector<std::string> pieces_;  // vocab.json spelling
  std::string piece_arena_;          // the same, concatenated
  std::vector<std::uint32_t> piece_offset_;
  std::vector<std::uint16_t> byte_len_;
  std::vector<std::string> bytes_;  // raw bytes of each token
  masque::tok::TokenMap piece_ids_;
  masque::tok::TokenMap whole_;  // raw bytes -> id, for pieces that are one token
  TokenId byte_token_[256] = {};
  masque::tok::MergeTable merges_;
  mutable masque::tok::PieceCache cache_;
  masque::SpecialTokens special_;
  masque::tok::SpecialSplitter specials_in_text_;
  bool add_bos_ = false;
};

masque::Plugin* create(const masque::Params& params) {
  return new BytePairEncoder(params);
}

const masque::ParamSpec kParams[] = {
    {.name = "path",
     .type = masque::ParamType::path,
     .default_value = "",
     .help = "folder with vocab.json and merges.txt (Hugging Face GPT-2 layout)"},
    {.name = "vocab",
     .type = masque::ParamType::path,
     .default_value = "",
     .help = "vocab.json to use instead of path/vocab.json: {\"token\": id} with tokens spelled "
             "in GPT-2's byte-to-unicode alphabet (OpenAI's encoder.json)"},
    {.name = "merges",
     .type = masque::ParamType::path,
     .default_value = "",
     .help = "merges.txt to use instead of path/merges.txt: '#version' header, then one merge "
             "'A B' per line, highest priority first (OpenAI's vocab.bpe)"},
    {.name = "add_bos",
     .type = masque::ParamType::boolean,
     .default_value = "false",
     .help = "put <|endoftext|> before the text when special tokens are added (GPT-2 itself "
             "adds nothing)"},
    {.name = "split_special",
     .type = masque::ParamType::boolean,
     .default_value = "true",
     .help = "treat <|endoftext|> written in the text as the special token (Hugging Face); "
             "false encodes it as ordinary text (tiktoken's encode_ordinary)"},
};

// A folder's vocab.json and merges.txt (GPT-2's); below a folder's tokenizer.json, above a
// vocab.txt.
const masque::TokenizerFolderFiles kReads[] = {{.files = "vocab.json merges.txt"}};
const masque::TokenizerTraits kTraits = masque::tok::hf_folder_traits(kReads, 20);

const masque::PluginDescriptor* descriptor() {
  static const masque::PluginDescriptor d{
      .kind = masque::PluginKind::tokenizer,
      .name = "bpe",
      .version = "1.0.0",
      .license = "MIT",
      .description = "GPT-2 byte-level BPE (vocab.json + merges.txt)",
      .params = kParams,
      .num_params = sizeof(kParams) / sizeof(kParams[0]),
      .create = create,
      .tokenizer = &kTraits,
  };
  return &d;
}

}  // namespace

MASQUE_PLUGIN(descriptor)

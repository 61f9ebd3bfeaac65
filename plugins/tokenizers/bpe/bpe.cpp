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

#include "json_file.hpp"
#include "masque/error.hpp"
#include "masque/params.hpp"
#include "masque/tokenizer.hpp"
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

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes
// for U+0100.. in byte order (a space is U+0120 'Ġ', a newline U+010A 'Ċ').
std::array<char32_t, 256> bytes_to_unicode() {
  std::array<char32_t, 256> map{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    map[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return map;
}

// Pair of token ids -> (rank, merged id): open addressing, linear probing.
class MergeTable {
 public:
  struct Entry {
    std::uint64_t key = kEmpty;
    std::uint32_t rank = 0;
    TokenId merged = -1;
  };
  static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};

  void reserve(std::size_t n) {
    std::size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    slots_.assign(cap, Entry{});
    mask_ = cap - 1;
  }
  // False when the pair is already there.
  bool insert(TokenId a, TokenId b, std::uint32_t rank, TokenId merged) {
    const std::uint64_t key = make_key(a, b);
    for (std::size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return false;
      if (slots_[i].key == kEmpty) {
        slots_[i] = {key, rank, merged};
        return true;
      }
    }
  }
  const Entry* find(TokenId a, TokenId b) const {
    const std::uint64_t key = make_key(a, b);
    for (std::size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      const Entry& e = slots_[i];
      if (e.key == key) return &e;
      if (e.key == kEmpty) return nullptr;
    }
  }

 private:
  static std::uint64_t make_key(TokenId a, TokenId b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) |
           static_cast<std::uint32_t>(b);
  }
  static std::size_t hash(std::uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return static_cast<std::size_t>(k);
  }
  std::vector<Entry> slots_;
  std::size_t mask_ = 0;
};

constexpr std::uint32_t kNoRank = std::numeric_limits<std::uint32_t>::max();

// Cache of piece -> ids shared by all threads: a fixed table of 64-byte slots, two per set,
// each holding a short piece and its ids inline (one cache line per probe, no allocation).
// Lock stripes guard groups of sets; a full set drops its older entry.
class PieceCache {
 public:
  static constexpr std::size_t kMaxPieceBytes = 22;
  static constexpr std::size_t kMaxIds = 8;

  PieceCache() : slots_(2 * kSets) {}

  bool find(std::string_view piece, std::uint64_t hash, std::vector<TokenId>& out) const {
    const std::size_t set = hash & (kSets - 1);
    std::shared_lock lock(stripes_[set % kStripes]);
    for (std::size_t way = 0; way < 2; ++way) {
      const Slot& s = slots_[2 * set + way];
      if (s.count > 0 && s.hash == hash && s.length == piece.size() &&
          masque::tok::same_bytes(s.bytes, piece.data(), piece.size())) {
        out.assign(s.ids, s.ids + s.count);
        return true;
      }
    }
    return false;
  }
  void prefetch(std::uint64_t hash) const { __builtin_prefetch(&slots_[2 * (hash & (kSets - 1))]); }
  void insert(std::string_view piece, std::uint64_t hash, const std::vector<TokenId>& ids) const {
    if (piece.size() > kMaxPieceBytes || ids.empty() || ids.size() > kMaxIds) return;
    const std::size_t set = hash & (kSets - 1);
    std::unique_lock lock(stripes_[set % kStripes]);
    Slot* way = &slots_[2 * set];
    if (way[0].count > 0) way[1] = way[0];  // the newest entry goes first
    Slot& s = way[0];
    s.hash = hash;
    s.length = static_cast<std::uint8_t>(piece.size());
    s.count = static_cast<std::uint8_t>(ids.size());
    std::memcpy(s.bytes, piece.data(), piece.size());
    std::copy(ids.begin(), ids.end(), s.ids);
  }

 private:
  static constexpr std::size_t kSets = 1 << 14;  // 2 MiB in all
  static constexpr std::size_t kStripes = 64;
  struct alignas(64) Slot {
    std::uint64_t hash = 0;
    std::uint8_t length = 0, count = 0;  // count 0: empty
    char bytes[kMaxPieceBytes];
    TokenId ids[kMaxIds];
  };
  static_assert(sizeof(Slot) == 64);
  mutable std::vector<Slot> slots_;
  mutable std::array<std::shared_mutex, kStripes> stripes_;
};

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
    const auto b2u = bytes_to_unicode();
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
    const bool cacheable = piece.size() <= PieceCache::kMaxPieceBytes;
    if (cacheable && cache_.find(piece, h, ids)) return;
    bpe(piece, ids);
    if (cacheable) cache_.insert(piece, h, ids);
  }

  // Merges the bytes of one piece: the lowest-ranked adjacent pair first, the leftmost of equal
  // ones (Hugging Face's order). Short pieces: a linear scan per merge; long ones: a heap.
  void bpe(std::string_view piece, std::vector<TokenId>& ids) const {
    const std::size_t n = piece.size();
    ids.resize(n);
    for (std::size_t i = 0; i < n; ++i) ids[i] = byte_token_[static_cast<unsigned char>(piece[i])];
    if (n < 2) return;
    if (n > 64) {
      bpe_heap(ids);
      return;
    }
    std::uint32_t ranks[64];
    TokenId merged[64];
    std::size_t m = n;
    auto rate = [&](std::size_t k) {
      const MergeTable::Entry* e = merges_.find(ids[k], ids[k + 1]);
      ranks[k] = e ? e->rank : kNoRank;
      merged[k] = e ? e->merged : -1;
    };
    for (std::size_t k = 0; k + 1 < m; ++k) rate(k);
    while (m > 1) {
      std::size_t best = 0;
      for (std::size_t k = 1; k + 1 < m; ++k)
        if (ranks[k] < ranks[best]) best = k;
      if (ranks[best] == kNoRank) break;
      ids[best] = merged[best];
      for (std::size_t k = best + 1; k + 1 < m; ++k) {
        ids[k] = ids[k + 1];
        ranks[k] = ranks[k + 1];
        merged[k] = merged[k + 1];
      }
      --m;
      if (best > 0) rate(best - 1);
      if (best + 1 < m) rate(best);
    }
    ids.resize(m);
  }

  void bpe_heap(std::vector<TokenId>& ids) const {
    const std::size_t n = ids.size();
    std::vector<std::int32_t> prev(n), next(n);
    for (std::size_t i = 0; i < n; ++i) {
      prev[i] = static_cast<std::int32_t>(i) - 1;
      next[i] = i + 1 < n ? static_cast<std::int32_t>(i + 1) : -1;
    }
    using Item = std::pair<std::uint32_t, std::int32_t>;  // (rank, left position)
    std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap;
    auto consider = [&](std::int32_t left) {
      if (left < 0 || next[left] < 0) return;
      if (const MergeTable::Entry* e = merges_.find(ids[left], ids[next[left]]))
        heap.emplace(e->rank, left);
    };
    for (std::size_t i = 0; i + 1 < n; ++i) consider(static_cast<std::int32_t>(i));
    std::vector<bool> gone(n, false);
    while (!heap.empty()) {
      const auto [rank, left] = heap.top();
      heap.pop();
      if (gone[left] || next[left] < 0) continue;
      const std::int32_t right = next[left];
      const MergeTable::Entry* e = merges_.find(ids[left], ids[right]);
      if (!e || e->rank != rank) continue;  // stale: the pair changed since it was queued
      ids[left] = e->merged;
      gone[right] = true;
      next[left] = next[right];
      if (next[right] >= 0) prev[next[right]] = left;
      consider(prev[left]);
      consider(left);
    }
    std::size_t m = 0;
    for (std::int32_t i = 0; i >= 0; i = next[i]) ids[m++] = ids[i];
    ids.resize(m);
  }

  std::vector<std::string> pieces_;  // vocab.json spelling
  std::string piece_arena_;          // the same, concatenated
  std::vector<std::uint32_t> piece_offset_;
  std::vector<std::uint16_t> byte_len_;
  std::vector<std::string> bytes_;  // raw bytes of each token
  masque::tok::TokenMap piece_ids_;
  masque::tok::TokenMap whole_;  // raw bytes -> id, for pieces that are one token
  TokenId byte_token_[256] = {};
  MergeTable merges_;
  mutable PieceCache cache_;
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
  };
  return &d;
}

}  // namespace

MASQUE_PLUGIN(descriptor)

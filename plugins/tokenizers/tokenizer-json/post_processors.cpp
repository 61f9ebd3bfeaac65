#include "post_processors.hpp"

#include <map>

#include <unicode/uchar.h>

#include "masque/error.hpp"
#include "token_files.hpp"
#include "utf8.hpp"

namespace masque::hfjson {

namespace {

void push(Encoding& e, TokenId id, std::string piece, ByteSpan span, std::int32_t type) {
  e.ids.push_back(id);
  e.pieces.push_back(std::move(piece));
  e.offsets.push_back(span);
  e.type_ids.push_back(type);
}

void append(Encoding& to, const Encoding& from, std::int32_t type) {
  for (std::size_t k = 0; k < from.ids.size(); ++k)
    push(to, from.ids[k], from.pieces[k], from.offsets[k], type);
}

ByteSpan start_of(const Encoding& e) {
  return e.offsets.empty() ? ByteSpan{0, 0}
                           : ByteSpan{e.offsets.front().begin, e.offsets.front().begin};
}
ByteSpan end_of(const Encoding& e) {
  return e.offsets.empty() ? ByteSpan{0, 0} : ByteSpan{e.offsets.back().end, e.offsets.back().end};
}

struct SpecialRef {
  std::vector<TokenId> ids;
  std::vector<std::string> pieces;
};

class Template final : public PostProcessor {
 public:
  explicit Template(const Node& node) {
    const Node specials = node.get("special_tokens");
    if (!specials.is_null()) {
      if (!specials.value().is_object()) specials.fail("expected an object");
      for (const auto& [name, value] : specials.value().items()) {
        const Node s = specials.at(name.c_str());
        SpecialRef ref;
        const Node ids = s.at("ids"), tokens = s.at("tokens");
        for (std::size_t i = 0; i < ids.size(); ++i) {
          const std::int64_t id = ids.at(i).integer();
          if (id < 0 || id > INT32_MAX) ids.at(i).fail("not a token id");
          ref.ids.push_back(static_cast<TokenId>(id));
        }
        for (std::size_t i = 0; i < tokens.size(); ++i) ref.pieces.push_back(tokens.at(i).str());
        if (ref.pieces.size() != ref.ids.size()) s.fail("\"ids\" and \"tokens\" differ in length");
        specials_[name] = std::move(ref);
      }
    }
    single_ = parse(node.at("single"));
    pair_ = node.has("pair") ? parse(node.at("pair")) : std::vector<Item>{};
  }
  bool process(Encoding& first, Encoding* second, bool add_special) const override {
    const std::vector<Item>& items = second ? pair_ : single_;
    if (second && items.empty()) return false;
    Encoding out;
    const Encoding* last = nullptr;  // the sequence placed last
    for (const Item& it : items) {
      if (it.sequence != 0) {
        const Encoding* src = it.sequence == 'A' ? &first : second;
        if (src) append(out, *src, it.type_id);
        last = src ? src : last;
        continue;
      }
      if (!add_special) continue;
      const SpecialRef& ref = specials_.at(it.special);
      // An empty span where it stands: the start of the first text, or the end of the text
      // before it.
      const ByteSpan span = last ? end_of(*last) : start_of(first);
      for (std::size_t k = 0; k < ref.ids.size(); ++k)
        push(out, ref.ids[k], ref.pieces[k], span, it.type_id);
    }
    first = std::move(out);
    return second != nullptr;
  }

 private:
  struct Item {
    char sequence = 0;  // 'A', 'B', or 0 for a special token
    std::string special;
    std::int32_t type_id = 0;
  };
  std::vector<Item> parse(const Node& list) {
    std::vector<Item> items;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const Node n = list.at(i);
      Item it;
      if (n.has("Sequence")) {
        const Node s = n.at("Sequence");
        const std::string id = s.str("id");
        if (id != "A" && id != "B") s.at("id").fail("expected \"A\" or \"B\"");
        it.sequence = id[0];
        it.type_id = static_cast<std::int32_t>(s.integer("type_id", 0));
      } else if (n.has("SpecialToken")) {
        const Node s = n.at("SpecialToken");
        it.special = s.str("id");
        it.type_id = static_cast<std::int32_t>(s.integer("type_id", 0));
        if (!specials_.count(it.special))
          s.at("id").fail("the special token " + masque::tok::quote_token(it.special) +
                          " is not in \"special_tokens\"");
      } else {
        n.fail("expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
      items.push_back(std::move(it));
    }
    return items;
  }
  std::map<std::string, SpecialRef> specials_;
  std::vector<Item> single_, pair_;
};

// BERT ([CLS] A [SEP] B [SEP]) and RoBERTa (<s> A </s> </s> B </s>).
class ClsSep final : public PostProcessor {
 public:
  ClsSep(const Node& node, bool roberta) : roberta_(roberta) {
    auto token = [&](const char* key, TokenId& id, std::string& piece) {
      const Node t = node.at(key);
      if (!t.value().is_array() || t.value().size() != 2) t.fail("expected [\"token\", id]");
      piece = t.at(std::size_t{0}).str();
      id = static_cast<TokenId>(t.at(std::size_t{1}).integer());
    };
    token("cls", cls_, cls_piece_);
    token("sep", sep_, sep_piece_);
  }
  bool process(Encoding& first, Encoding* second, bool add_special) const override {
    if (!add_special) return false;
    Encoding out;
    push(out, cls_, cls_piece_, start_of(first), 0);
    append(out, first, 0);
    push(out, sep_, sep_piece_, end_of(first), 0);
    if (second) {
      const std::int32_t t = roberta_ ? 0 : 1;
      if (roberta_) push(out, sep_, sep_piece_, start_of(*second), t);
      append(out, *second, t);
      push(out, sep_, sep_piece_, end_of(*second), t);
    }
    first = std::move(out);
    return second != nullptr;
  }

 private:
  bool roberta_;
  TokenId cls_ = -1, sep_ = -1;
  std::string cls_piece_, sep_piece_;
};

// ByteLevel: with trim_offsets, a token's span leaves out the whitespace it starts or ends with
// (its pieces are in GPT-2's alphabet, where a space is 'Ġ').
class ByteLevelOffsets final : public PostProcessor {
 public:
  explicit ByteLevelOffsets(const Node& node)
      : trim_(node.boolean("trim_offsets", true)),
        add_prefix_space_(node.boolean("add_prefix_space", true)) {}
  bool process(Encoding& first, Encoding* second, bool) const override {
    if (trim_) {
      trim(first);
      if (second) trim(*second);
    }
    return false;
  }

 private:
  static bool space(char32_t c) {
    return c == 0x120 || u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE);
  }
  void trim(Encoding& e) const {
    for (std::size_t k = 0; k < e.ids.size(); ++k) {
      const std::string& p = e.pieces[k];
      std::vector<char32_t> chars;
      for (std::size_t i = 0; i < p.size();) {
        char32_t cp = 0;
        int len = masque::tok::decode_utf8(p, i, cp);
        if (len == 0) len = 1;
        chars.push_back(cp);
        i += static_cast<std::size_t>(len);
      }
      std::uint32_t lead = 0, trail = 0;
      while (lead < chars.size() && space(chars[lead])) ++lead;
      while (trail < chars.size() && space(chars[chars.size() - 1 - trail])) ++trail;
      ByteSpan& s = e.offsets[k];
      if (lead > 0) {
        if ((k == 0 || s.begin == 0) && add_prefix_space_ && lead == 1) lead = 0;
        s.begin = std::min(s.begin + lead, s.end);
      }
      if (trail > 0 && s.end >= trail) s.end = std::max(s.end - trail, s.begin);
    }
  }
  bool trim_, add_prefix_space_;
};

class Sequence final : public PostProcessor {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PostProcessor>> parts) : parts_(std::move(parts)) {}
  bool process(Encoding& first, Encoding* second, bool add_special) const override {
    // Each processor works on what the previous one left; once a pair is joined, the rest see
    // one encoding.
    bool joined = false;
    for (const auto& p : parts_)
      if (p->process(first, joined ? nullptr : second, add_special)) joined = true;
    return joined;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

}  // namespace

void join_pair(Encoding& first, Encoding& second) {
  for (std::size_t k = 0; k < second.ids.size(); ++k)
    push(first, second.ids[k], second.pieces[k], second.offsets[k], 1);
}

std::unique_ptr<PostProcessor> make_post_processor(const Node& node) {
  if (node.is_null()) return nullptr;
  const std::string type = node.type();
  if (type == "TemplateProcessing") return std::make_unique<Template>(node);
  if (type == "BertProcessing") return std::make_unique<ClsSep>(node, false);
  if (type == "RobertaProcessing") return std::make_unique<ClsSep>(node, true);
  if (type == "ByteLevel") return std::make_unique<ByteLevelOffsets>(node);
  if (type == "Sequence") {
    const Node list = node.at("processors");
    std::vector<std::unique_ptr<PostProcessor>> parts;
    for (std::size_t i = 0; i < list.size(); ++i)
      if (auto p = make_post_processor(list.at(i))) parts.push_back(std::move(p));
    return std::make_unique<Sequence>(std::move(parts));
  }
  node.unknown_type("post-processor",
                    "TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel, Sequence");
}

}  // namespace masque::hfjson

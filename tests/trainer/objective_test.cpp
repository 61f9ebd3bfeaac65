// The objectives lay records out as the inference tasks do, under real mask plugins, and name
// exactly the outputs that carry a loss (docs/training.md, "Objectives").
#include <catch2/catch.hpp>

#include <algorithm>

#include "../models/model_plugin.hpp"
#include "io/records.hpp"
#include "masque/error.hpp"
#include "masque/tokenizer.hpp"
#include "masque/train/objective.hpp"
#include "test_support.hpp"

using namespace masque;
using namespace masque::train;
using test::load_mask;
using test::load_plugin;

namespace {

// [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4 a=5 b=6 c=7 d=8 x=9 y=10 z=11
test::LoadedPlugin<Tokenizer> letters() {
  const auto dir = test::own_scratch_dir("objective_vocab");
  test::write_file(dir / "vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\nb\nc\nd\nx\ny\nz\n");
  Params p;
  p.set("path", "");
  p.set("vocab", (dir / "vocab.txt").string());
  p.set("lowercase", "false");
  p.set("strip_accents", "false");
  p.set("max_chars_per_word", std::int64_t{100});
  p.set("split_special", true);
  return load_plugin<Tokenizer>("tokenizer", "wordpiece", p);
}

ModelInfo bert_like(std::int32_t positions = 64) {
  ModelInfo info;
  info.kind = ModelKind::encoder_only;
  info.vocab_size = 12;
  info.max_positions = positions;
  info.pad = 0;
  return info;
}

Record record(std::uint64_t id, nlohmann::ordered_json fields) {
  Record r;
  r.id = id;
  if (fields.contains("text")) r.text = fields["text"];
  r.fields = std::move(fields);
  return r;
}

std::vector<std::int32_t> row_of(const std::vector<std::int32_t>& v, std::int32_t b, std::int32_t t,
                                 std::int32_t n) {
  return {v.begin() + b * t, v.begin() + b * t + n};
}

}  // namespace

TEST_CASE("objective seq2seq (UniLM): [CLS] source [SEP] target [SEP], loss on target [SEP]") {
  auto tok = letters();
  auto mask = load_mask("seq2seq");
  Objective objective({.kind = ObjectiveKind::seq2seq}, *tok, nullptr, {.inputs = mask.get()},
                      bert_like());
  Example long_one = objective.prepare(record(0, {{"source", "a b c"}, {"target", "x y"}}));
  Example short_one = objective.prepare(record(1, {{"source", "d"}, {"target", "z"}}));
  CHECK(long_one.ids == std::vector<TokenId>{2, 5, 6, 7, 3, 9, 10, 3});
  CHECK(long_one.segments == std::vector<std::int32_t>{0, 0, 0, 0, 0, 1, 1, 1});

  const Example* batch[] = {&long_one, &short_one};
  const TrainingBatch out = objective.lay_out(batch, 0);
  REQUIRE(out.inputs.batch == 2);
  REQUIRE(out.inputs.length == 8);
  CHECK(row_of(out.inputs.attention.rank, 0, 8, 8) ==
        std::vector<std::int32_t>{0, 0, 0, 0, 0, 1, 2, 3});
  CHECK(row_of(out.inputs.token_types, 0, 8, 8) ==
        std::vector<std::int32_t>{0, 0, 0, 0, 0, 1, 1, 1});
  CHECK(row_of(out.inputs.positions, 1, 8, 5) == std::vector<std::int32_t>{0, 1, 2, 3, 4});
  CHECK(out.inputs.attention.role[8 + 5] == TokenRole::pad);
  // The source's [SEP] (row 4) predicts x; y's row predicts the final [SEP].
  CHECK(out.rows == std::vector<std::int32_t>{4, 5, 6, 8 + 2, 8 + 3});
  CHECK(out.labels == std::vector<TokenId>{9, 10, 3, 11, 3});

  // The same layout under the causal mask: a decoder-only model of `letters [SEP] phones`.
  auto causal = load_mask("causal");
  Objective decoder_only({.kind = ObjectiveKind::seq2seq}, *tok, nullptr, {.inputs = causal.get()},
                         bert_like());
  const TrainingBatch c = decoder_only.lay_out(batch, 0);
  CHECK(row_of(c.inputs.attention.rank, 0, 8, 8) ==
        std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(c.rows == out.rows);
  CHECK(c.labels == out.labels);

  CHECK_THROWS_WITH(objective.prepare(record(2, {{"source", "a"}, {"target", ""}})),
                    "empty target");
  CHECK_THROWS_WITH(objective.prepare(record(3, {{"source", "a"}})), "no 'target' field");
  Objective tight({.kind = ObjectiveKind::seq2seq, .max_tokens = 6}, *tok, nullptr,
                  {.inputs = mask.get()}, bert_like());
  CHECK_THROWS_WITH(tight.prepare(record(4, {{"source", "a b c"}, {"target", "x y"}})),
                    Catch::Contains("too long: 8 tokens, more than 6"));
}

TEST_CASE("objective causal-lm: every position after the first is predicted from the one before") {
  auto tok = letters();
  auto causal = load_mask("causal");
  Objective objective({.kind = ObjectiveKind::causal_lm}, *tok, nullptr, {.inputs = causal.get()},
                      bert_like());
  Example e = objective.prepare(record(0, {{"text", "a b"}}));
  CHECK(e.ids == std::vector<TokenId>{2, 5, 6, 3});
  const Example* batch[] = {&e};
  const TrainingBatch out = objective.lay_out(batch, 0);
  CHECK(out.rows == std::vector<std::int32_t>{0, 1, 2});
  CHECK(out.labels == std::vector<TokenId>{5, 6, 3});
  CHECK(out.inputs.attention.rank == std::vector<std::int32_t>{0, 1, 2, 3});
}

TEST_CASE(
    "objective plm: the queries of the last K steps of the order, each predicting its token") {
  auto tok = letters();
  Params p;
  p.set("stream", "query");
  p.set("seed", std::int64_t{0});
  auto perm = load_mask("permutation", p);
  Objective objective({.kind = ObjectiveKind::plm, .plm_predict = 2}, *tok, nullptr,
                      {.inputs = perm.get()}, bert_like());
  // [CLS] a b c [SEP] = 2 5 6 7 3, order 4 1 3 0 2: the last two steps predict 0 and 2.
  Example e = objective.prepare(
      record(0, {{"text", "a b c"}, {"order", nlohmann::json::array({4, 1, 3, 0, 2})}}));
  const Example* batch[] = {&e};
  const TrainingBatch out = objective.lay_out(batch, 0);
  REQUIRE(out.inputs.length == 7);
  CHECK(out.inputs.ids == std::vector<TokenId>{2, 5, 6, 7, 3, 4, 4});
  CHECK(out.inputs.positions == std::vector<std::int32_t>{0, 1, 2, 3, 4, 0, 2});
  // Content ranks are the steps of the order; the query of step t ranks t - 1.
  CHECK(out.inputs.attention.rank == std::vector<std::int32_t>{3, 1, 4, 2, 0, 2, 3});
  CHECK(out.inputs.attention.role[5] == TokenRole::query);
  CHECK(out.rows == std::vector<std::int32_t>{5, 6});
  CHECK(out.labels == std::vector<TokenId>{2, 6});

  // The objective asks for the query stream itself; a strategy without one is an error.
  Params content;
  content.set("seed", std::int64_t{0});
  auto content_only = load_mask("permutation", content);
  Objective asks({.kind = ObjectiveKind::plm, .plm_predict = 2}, *tok, nullptr,
                 {.inputs = content_only.get()}, bert_like());
  CHECK(asks.lay_out(batch, 0).labels == out.labels);
  // ... refused when the objective is made, before any data is read.
  auto causal = load_mask("causal");
  CHECK_THROWS_WITH(
      Objective({.kind = ObjectiveKind::plm}, *tok, nullptr, {.inputs = causal.get()}, bert_like()),
      Catch::Contains("a mask strategy with a query stream"));
}

TEST_CASE("objective plm on source/target: the source is given, the target's slots are permuted") {
  auto tok = letters();
  Params p;
  p.set("order", "random");
  p.set("stream", "query");
  p.set("seed", std::int64_t{5});
  auto perm = load_mask("permutation", p);
  Objective objective({.kind = ObjectiveKind::plm, .plm_fraction = 1, .plm_target_slack = 1}, *tok,
                      nullptr, {.inputs = perm.get()}, bert_like());
  // "a b" -> "x y": two source words + slack 1 = three slots, the last one a [SEP] filler.
  Example e = objective.prepare(record(0, {{"source", "a b"}, {"target", "x y"}}));
  CHECK(e.ids == std::vector<TokenId>{2, 5, 6, 3, 9, 10, 3, 3});
  CHECK(e.context == std::vector<std::uint8_t>{1, 1, 1, 1, 0, 0, 0, 1});
  // The same layout as plm-generate's template once its [MASK]s are filled.
  std::vector<TokenId> template_ids = tok->encode("a b [SEP] [MASK] [MASK] [MASK]", true).ids;
  REQUIRE(template_ids.size() == e.ids.size());
  for (std::size_t t = 0; t < e.ids.size(); ++t)
    CHECK(template_ids[t] == (e.context[t] ? e.ids[t] : 4));

  e.line = 3;
  const Example* batch[] = {&e};
  const TrainingBatch out = objective.lay_out(batch, 0);
  REQUIRE(out.inputs.length == 11);  // 8 tokens and a query per slot
  std::vector<std::int32_t> ranks = row_of(out.inputs.attention.rank, 0, 11, 8);
  for (std::size_t t = 0; t < 8; ++t)
    if (e.context[t]) CHECK(ranks[t] == -1);
  std::vector<std::int32_t> slot_ranks{ranks[4], ranks[5], ranks[6]};
  std::sort(slot_ranks.begin(), slot_ranks.end());
  CHECK(slot_ranks == std::vector<std::int32_t>{0, 1, 2});
  REQUIRE(out.rows == std::vector<std::int32_t>{8, 9, 10});
  for (std::size_t q = 0; q < 3; ++q) {
    const std::int32_t position = out.inputs.positions[out.rows[q]];
    CHECK(position >= 4);
    CHECK(position <= 6);
    CHECK(out.labels[q] == e.ids[position]);
  }
  // A new random order each epoch (for some of these records at least).
  bool changed = false;
  for (std::uint64_t line = 1; line <= 8 && !changed; ++line) {
    e.line = line;
    changed = objective.lay_out(batch, 0).inputs.positions !=
              objective.lay_out(batch, 1).inputs.positions;
  }
  CHECK(changed);
  // A target longer than its slots cannot be laid out: the record is skipped and reported.
  CHECK_THROWS_WITH(objective.prepare(record(0, {{"source", "a"}, {"target", "x y z"}})),
                    Catch::Contains("target longer than its slots: 3 tokens, 2 slots"));
}

TEST_CASE(
    "objective mlm: 15 % of the non-special tokens, 80/10/10, the same for a record anywhere") {
  auto tok = letters();
  auto bidirectional = load_mask("bidirectional");
  Objective objective({.kind = ObjectiveKind::mlm, .seed = 7}, *tok, nullptr,
                      {.inputs = bidirectional.get()}, bert_like(4096));
  std::string text;
  for (int i = 0; i < 3000; ++i) text += i ? " c" : "c";
  Record r = record(41, {{"text", text}});
  Example e = objective.prepare(r);
  e.line = 42;
  Example other = objective.prepare(record(0, {{"text", "a b"}}));
  other.line = 1;
  const Example* alone[] = {&e};
  const Example* together[] = {&other, &e};
  const TrainingBatch a = objective.lay_out(alone, 3), b = objective.lay_out(together, 3);

  const std::int32_t n = static_cast<std::int32_t>(e.ids.size());
  std::size_t masked = 0, random = 0, kept = 0;
  for (std::size_t i = 0; i < a.rows.size(); ++i) {
    const TokenId fed = a.inputs.ids[a.rows[i]];
    CHECK(a.labels[i] == 7);
    CHECK(a.rows[i] > 0);      // never [CLS] (row 0) ...
    CHECK(a.rows[i] < n - 1);  // ... nor [SEP]
    (fed == 4 ? masked : fed == 7 ? kept : random)++;
  }
  const double chosen = static_cast<double>(a.rows.size()) / 3000;
  CHECK(chosen == Approx(0.15).margin(0.02));
  CHECK(static_cast<double>(masked) / a.rows.size() == Approx(0.8).margin(0.04));
  CHECK(static_cast<double>(kept + random) / a.rows.size() == Approx(0.2).margin(0.04));
  // The same record gets the same corruption in another batch; another epoch, another one.
  std::vector<TokenId> in_b;
  for (std::size_t i = 0; i < b.rows.size(); ++i)
    if (b.rows[i] >= b.inputs.length) in_b.push_back(b.inputs.ids[b.rows[i]]);
  std::vector<TokenId> in_a;
  for (std::int32_t row : a.rows) in_a.push_back(a.inputs.ids[row]);
  CHECK(in_a == in_b);
  CHECK(objective.lay_out(alone, 4).rows != a.rows);
}

TEST_CASE("objective seq2seq on an encoder-decoder: teacher forcing from the start token") {
  auto tok = letters();
  auto bidirectional = load_mask("bidirectional");
  auto causal = load_mask("causal");
  ModelInfo info = bert_like();
  info.kind = ModelKind::encoder_decoder;
  info.decoder_start = 2;
  info.eos = 3;
  Objective objective({.kind = ObjectiveKind::seq2seq}, *tok, nullptr,
                      {.inputs = causal.get(), .source = bidirectional.get()}, info);
  Example e = objective.prepare(record(0, {{"source", "a b"}, {"target", "x y z"}}));
  Example f = objective.prepare(record(1, {{"source", "c"}, {"target", "x"}}));
  const Example* batch[] = {&e, &f};
  const TrainingBatch out = objective.lay_out(batch, 0);
  CHECK(out.source.ids == std::vector<TokenId>{2, 5, 6, 3, 2, 7, 3, 0});
  CHECK(out.source.attention.rank == std::vector<std::int32_t>(8, 0));
  CHECK(out.inputs.ids == std::vector<TokenId>{2, 9, 10, 11, 2, 9, 0, 0});
  CHECK(row_of(out.inputs.attention.rank, 0, 4, 4) == std::vector<std::int32_t>{0, 1, 2, 3});
  CHECK(out.rows == std::vector<std::int32_t>{0, 1, 2, 3, 4, 5});
  CHECK(out.labels == std::vector<TokenId>{9, 10, 11, 3, 9, 3});
  CHECK_THROWS_WITH(Objective({.kind = ObjectiveKind::mlm}, *tok, nullptr,
                              {.inputs = causal.get(), .source = bidirectional.get()}, info),
                    Catch::Contains("trains with objective seq2seq"));
}

TEST_CASE("objective: what a step could not lay out is refused when the record is prepared") {
  auto tok = letters();
  ModelInfo model = bert_like();
  model.source_vocab_size = 12;
  auto causal = load_mask("causal");
  Objective lm({.kind = ObjectiveKind::causal_lm}, *tok, nullptr, {.inputs = causal.get()}, model);
  Record ids = record(0, {});
  ids.ids = std::vector<TokenId>{2, 5, 60, 3};
  CHECK_THROWS_WITH(lm.prepare(ids), "id outside the model's vocabulary: 60 (12 ids)");
  ids.ids = std::vector<TokenId>{2, 5, 11, 3};
  CHECK(lm.prepare(ids).ids.size() == 4);

  Params p;
  p.set("stream", "query");
  p.set("seed", std::int64_t{0});
  auto perm = load_mask("permutation", p);
  Objective plm({.kind = ObjectiveKind::plm, .plm_predict = 2}, *tok, nullptr,
                {.inputs = perm.get()}, model);
  for (const auto& order :
       {nlohmann::json::array({1, 0}), nlohmann::json::array({0, 0, 1, 2, 3}),
        nlohmann::json::array({0, 1, 2, 3, 9}), nlohmann::json::array({0, 1, 2, 3, -1})}) {
    INFO(order.dump());
    CHECK_THROWS_WITH(plm.prepare(record(0, {{"text", "a b c"}, {"order", order}})),
                      Catch::StartsWith("bad order: "));
  }
  CHECK(
      plm.prepare(record(0, {{"text", "a b c"}, {"order", nlohmann::json::array({4, 1, 3, 0, 2})}}))
          .order.size() == 5);
}

TEST_CASE("objective diffusion: slots after the source noised per record whatever the batch") {
  auto tok = letters();
  auto bidirectional = load_mask("bidirectional");
  Objective objective({.kind = ObjectiveKind::diffusion, .plm_target_slack = 1, .seed = 4}, *tok,
                      nullptr, {.inputs = bidirectional.get()}, bert_like());
  // `a b c` + `x y`: 3 + 1 slots, the last a [SEP] filler; no final [SEP].
  Example e = objective.prepare(record(0, {{"source", "a b c"}, {"target", "x y"}}));
  CHECK(e.ids == std::vector<TokenId>{2, 5, 6, 7, 3, 9, 10, 3, 3});
  CHECK(e.segments == std::vector<std::int32_t>{0, 0, 0, 0, 0, 1, 1, 1, 1});
  CHECK_THROWS_WITH(objective.prepare(record(1, {{"source", "a"}, {"target", "x y z"}})),
                    Catch::Contains("target longer than its slots"));
  Example other = objective.prepare(record(1, {{"source", "d"}, {"target", "z"}}));
  // Over a few lines some slots are masked and some not; the rows are masked slots only, each
  // fed [MASK] and weighted 1 / t (one t per record), and every slot counts in the divisor.
  bool some_kept = false;
  for (std::uint64_t line = 1; line <= 6; ++line) {
    e.line = line;
    other.line = 100 + line;
    const Example* both[] = {&e, &other};
    const TrainingBatch b = objective.lay_out(both, 0);
    CHECK(b.count() == 4 + 2);
    REQUIRE(b.weights.size() == b.rows.size());
    for (std::size_t k = 0; k < b.rows.size(); ++k) {
      CHECK(b.inputs.ids[static_cast<std::size_t>(b.rows[k])] == 4);
      CHECK(b.weights[k] >= 1.0);
      CHECK(b.weights[k] <= 1000.0 + 1e-9);
    }
    for (std::size_t p = 5; p < 9; ++p) some_kept = some_kept || b.inputs.ids[p] == e.ids[p];
    // Alone in a batch the record is noised the same way; in another epoch differently.
    const Example* alone[] = {&e};
    const TrainingBatch a = objective.lay_out(alone, 0);
    CHECK(std::vector<TokenId>(a.inputs.ids.begin(), a.inputs.ids.begin() + 9) ==
          std::vector<TokenId>(b.inputs.ids.begin(), b.inputs.ids.begin() + 9));
  }
  CHECK(some_kept);
  // Under block-causal the slots stay clean and the noise goes into the copy.
  auto blocks = load_mask("block-causal");
  Objective bd3({.kind = ObjectiveKind::diffusion, .plm_target_slack = 1, .seed = 4}, *tok, nullptr,
                {.inputs = blocks.get()}, bert_like());
  e.line = 3;
  const Example* one[] = {&e};
  const TrainingBatch c = bd3.lay_out(one, 0);
  REQUIRE(c.inputs.length == 13);
  CHECK(std::vector<TokenId>(c.inputs.ids.begin(), c.inputs.ids.begin() + 9) == e.ids);
  CHECK(row_of(c.inputs.positions, 0, 13, 13) ==
        std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 5, 6, 7, 8});
  for (std::int32_t row : c.rows) CHECK(row >= 9);
  // Any mask without a query stream noises in place; eps must leave t in (eps, 1].
  auto causal = load_mask("causal");
  CHECK_NOTHROW(Objective({.kind = ObjectiveKind::diffusion}, *tok, nullptr,
                          {.inputs = causal.get()}, bert_like()));
  CHECK_THROWS_WITH(Objective({.kind = ObjectiveKind::diffusion, .diffusion_eps = 1}, *tok, nullptr,
                              {.inputs = bidirectional.get()}, bert_like()),
                    Catch::Contains("task.diffusion_eps"));
}

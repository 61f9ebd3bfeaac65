// Every parameter's gradient after one step equals float64 PyTorch autograd
// (tests/trainer/reference_trainer.py, plain torch written from the upstream models) within
// 1e-5 relative, for every trainable model of ../shared under every mask it supports. The
// reference lays out its batches itself from the raw token lists, so the objectives' layouts are
// checked on the way (mlm's random corruption is handed to it as a given layout).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>

#include "../models/model_plugin.hpp"
#include "masque/safetensors.hpp"
#include "masque/train/loss.hpp"
#include "masque/train/network.hpp"
#include "masque/train/objective.hpp"
#include "masque/transformer/model.hpp"
#include "test_support.hpp"

using namespace masque;
using namespace masque::train;
using test::load_mask;
using test::load_plugin;
using Json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct Reference {
  double loss = 0;
  SafeTensors grads;
};

// Runs the reference trainer for one step of `plan` (float64, lr 0) and reads what it wrote.
Reference run_reference(Json plan, const std::string& name) {
  const fs::path dir = test::scratch_dir("grad_" + name);
  plan["dtype"] = "float64";
  plan["steps"] = 1;
  plan["lr"] = 0.0;
  plan["max_grad_norm"] = 0.0;
  plan["batch_size"] = plan.value("batch_size", static_cast<int>(plan["examples"].size()));
  test::write_file(dir / "plan.json", plan.dump());
  const std::string command =
      std::string(MASQUE_TORCH_PYTHON) + " " + MASQUE_SOURCE_DIR +
      "/tests/trainer/reference_trainer.py " + (dir / "plan.json").string() + " --losses " +
      (dir / "losses.jsonl").string() + " --grads " + (dir / "grads.safetensors").string();
  INFO(command);
  REQUIRE(std::system(command.c_str()) == 0);
  Reference r;
  r.loss = test::read_jsonl(dir / "losses.jsonl").at(0).at("loss").get<double>();
  r.grads = SafeTensors::open(dir / "grads.safetensors");
  return r;
}

struct Loaded {
  test::LoadedPlugin<Model> model;
  transformer::TransformerSpec spec;
  ParameterSet params;
};

Loaded load_model(const std::string& plugin, const fs::path& folder) {
  Params p;
  p.set("path", folder.string());
  if (plugin == "bert") p.set("mlm_head", true);
  Loaded l{load_plugin<Model>("model", plugin, p), {}, {}};
  const auto* tm = dynamic_cast<const transformer::TransformerModel*>(l.model.get());
  REQUIRE(tm != nullptr);
  l.spec = tm->spec();
  l.params = ParameterSet::from_checkpoint(l.spec, transformer::open_checkpoint(folder));
  return l;
}

// masque's loss and gradients for one micro-batch, compared with the reference's.
void check_gradients(Loaded& m, const TrainingBatch& batch, const Reference& ref) {
  TrainableTransformer net(m.spec, m.params);
  auto tape = net.make_tape();
  Tensor logits;
  net.forward(batch.inputs, batch.source.batch > 0 ? &batch.source : nullptr, batch.rows, *tape,
              logits);
  Tensor dlogits;
  const CrossEntropyResult ce =
      cross_entropy(logits, batch.labels, static_cast<double>(batch.labels.size()), {}, &dlogits);
  CHECK(ce.loss == Approx(ref.loss).epsilon(1e-6));
  m.params.zero_grads();
  net.backward(*tape, dlogits);
  // Each tensor within 1e-5 of its own largest gradient; a gradient that is zero in exact
  // arithmetic (a key bias: softmax ignores a constant added to all of a query's scores) is held
  // to 1e-7 of the model's largest gradient instead, f32 rounding being all that is left of it.
  double global = 0;
  for (const auto& e : m.params.entries()) {
    const Tensor expected = ref.grads.get_f32(e.name);
    for (std::int64_t i = 0; i < expected.numel(); ++i)
      global = std::max(global, std::abs(double{expected.f32()[i]}));
  }
  for (const auto& e : m.params.entries()) {
    const Tensor expected = ref.grads.get_f32(e.name);
    REQUIRE(expected.numel() == e.grad.numel());
    double worst = 0, scale = 0;
    for (std::int64_t i = 0; i < expected.numel(); ++i) {
      worst = std::max(worst, std::abs(double{e.grad.f32()[i]} - expected.f32()[i]));
      scale = std::max(scale, std::abs(double{expected.f32()[i]}));
    }
    INFO(e.name << ": max |masque - torch| = " << worst << ", max |torch| = " << scale
                << ", model's max |torch| = " << global);
    CHECK(worst <= 1e-5 * scale + 1e-7 * global);
  }
}

test::LoadedPlugin<Tokenizer> chinese_wordpiece() {
  Params p;
  p.set("path", "");
  p.set("vocab", (test::shared_dir() / "tokenizers/bert-base-chinese/vocab.txt").string());
  p.set("lowercase", "false");
  p.set("strip_accents", "false");
  p.set("max_chars_per_word", std::int64_t{100});
  p.set("split_special", true);
  return load_plugin<Tokenizer>("tokenizer", "wordpiece", p);
}

std::vector<const Example*> pointers(const std::vector<Example>& examples) {
  std::vector<const Example*> out;
  for (const Example& e : examples) out.push_back(&e);
  return out;
}

// Token lists of different lengths (padding is exercised) from a small deterministic pattern.
std::vector<TokenId> tokens(int n, int seed, int vocab, int low = 5) {
  std::vector<TokenId> t;
  for (int i = 0; i < n; ++i) t.push_back(low + (seed * 131 + i * 71) % (vocab - low));
  return t;
}

Json unilm_examples(std::vector<Example>& out) {
  Json examples = Json::array();
  const int lengths[][2] = {{5, 3}, {2, 4}, {7, 1}};
  for (int i = 0; i < 3; ++i) {
    const auto src = tokens(lengths[i][0], i, 21128, 670),
               tgt = tokens(lengths[i][1], i + 7, 21128, 670);
    examples.push_back({{"source", src}, {"target", tgt}});
    Example e;
    e.line = static_cast<std::uint64_t>(i + 1);
    e.ids.push_back(101);
    e.ids.insert(e.ids.end(), src.begin(), src.end());
    e.ids.push_back(102);
    e.segments.assign(e.ids.size(), 0);
    e.ids.insert(e.ids.end(), tgt.begin(), tgt.end());
    e.ids.push_back(102);
    e.segments.resize(e.ids.size(), 1);
    out.push_back(e);
  }
  return examples;
}

const Json kBertSpecial = {{"cls", 101}, {"sep", 102}, {"mask", 103}};

}  // namespace

TEST_CASE("gradients: BERT under the seq2seq (UniLM) and causal masks, objective seq2seq") {
  const fs::path folder = test::shared_dir() / "models/tiny-bert-chinese";
  auto tok = chinese_wordpiece();
  for (const std::string mask_name : {"seq2seq", "causal"}) {
    SECTION(mask_name) {
      std::vector<Example> examples;
      const Json plan = {{"model", folder.string()},
                         {"objective", "seq2seq"},
                         {"mask", mask_name},
                         {"special", kBertSpecial},
                         {"examples", unilm_examples(examples)}};
      Loaded m = load_model("bert", folder);
      auto mask = load_mask(mask_name);
      Objective objective({.kind = ObjectiveKind::seq2seq}, *tok, nullptr, {.inputs = mask.get()},
                          m.model->info());
      check_gradients(m, objective.lay_out(pointers(examples), 0), run_reference(plan, mask_name));
    }
  }
}

TEST_CASE("gradients: BERT under the permutation mask with its query stream, objective plm") {
  const fs::path folder = test::shared_dir() / "models/tiny-bert-chinese";
  auto tok = chinese_wordpiece();
  Json examples_json = Json::array();
  std::vector<Example> examples;
  const std::vector<std::vector<std::int32_t>> orders = {
      {3, 1, 4, 0, 2}, {1, 0, 2}, {5, 2, 0, 6, 1, 4, 3}};
  for (std::size_t i = 0; i < orders.size(); ++i) {
    Example e;
    e.line = i + 1;
    e.ids = tokens(static_cast<int>(orders[i].size()), static_cast<int>(i), 21128, 670);
    e.order = orders[i];
    examples_json.push_back({{"ids", e.ids}, {"order", e.order}});
    examples.push_back(e);
  }
  const Json plan = {{"model", folder.string()},
                     {"objective", "plm"},
                     {"plm_predict", 2},
                     {"special", kBertSpecial},
                     {"examples", examples_json}};
  Loaded m = load_model("bert", folder);
  Params p;
  p.set("stream", "query");
  p.set("seed", std::int64_t{0});
  auto mask = load_mask("permutation", p);
  Objective objective({.kind = ObjectiveKind::plm, .plm_predict = 2}, *tok, nullptr,
                      {.inputs = mask.get()}, m.model->info());
  check_gradients(m, objective.lay_out(pointers(examples), 0), run_reference(plan, "plm"));
}

TEST_CASE("gradients: BERT under the bidirectional mask, objective mlm") {
  const fs::path folder = test::shared_dir() / "models/tiny-bert-chinese";
  auto tok = chinese_wordpiece();
  std::vector<Example> examples(3);
  for (std::size_t i = 0; i < examples.size(); ++i) {
    examples[i].line = i + 1;
    examples[i].ids = {101};
    for (TokenId t : tokens(static_cast<int>(6 + 3 * i), static_cast<int>(i), 21128, 670))
      examples[i].ids.push_back(t);
    examples[i].ids.push_back(102);
  }
  Loaded m = load_model("bert", folder);
  auto mask = load_mask("bidirectional");
  Objective objective({.kind = ObjectiveKind::mlm, .mlm_probability = 0.5, .seed = 3}, *tok,
                      nullptr, {.inputs = mask.get()}, m.model->info());
  const TrainingBatch batch = objective.lay_out(pointers(examples), 0);
  REQUIRE(!batch.rows.empty());
  // The corruption is masque's own (seeded); the reference gets the laid-out batch.
  const Batch& b = batch.inputs;
  Json given = {{"ids", Json::array()},  {"positions", Json::array()}, {"types", Json::array()},
                {"rank", Json::array()}, {"role", Json::array()},      {"rows", batch.rows},
                {"labels", batch.labels}};
  for (std::int32_t r = 0; r < b.batch; ++r) {
    const auto from = static_cast<std::size_t>(r) * b.length, to = from + b.length;
    given["ids"].push_back(std::vector<TokenId>(b.ids.begin() + from, b.ids.begin() + to));
    given["positions"].push_back(
        std::vector<std::int32_t>(b.positions.begin() + from, b.positions.begin() + to));
    given["types"].push_back(
        std::vector<std::int32_t>(b.token_types.begin() + from, b.token_types.begin() + to));
    given["rank"].push_back(
        std::vector<std::int32_t>(b.attention.rank.begin() + from, b.attention.rank.begin() + to));
    std::vector<int> roles;
    for (std::size_t i = from; i < to; ++i) roles.push_back(static_cast<int>(b.attention.role[i]));
    given["role"].push_back(roles);
  }
  const Json plan = {{"model", folder.string()},
                     {"objective", "given"},
                     {"batch_size", 1},
                     {"examples", Json::array({given})}};
  check_gradients(m, batch, run_reference(plan, "mlm"));
}

TEST_CASE("gradients: GPT-2 and Llama under the causal mask, objective causal-lm") {
  struct Family {
    const char* plugin;
    const char* folder;
    int vocab;
  };
  for (const Family f : {Family{"gpt2", "tiny-gpt2", 50257}, Family{"llama", "stories260k", 512}}) {
    SECTION(f.plugin) {
      const fs::path folder = test::shared_dir() / "models" / f.folder;
      Json examples_json = Json::array();
      std::vector<Example> examples;
      for (int i = 0; i < 3; ++i) {
        Example e;
        e.line = static_cast<std::uint64_t>(i + 1);
        e.ids = tokens(4 + 3 * i, i, f.vocab, 3);
        examples_json.push_back({{"ids", e.ids}});
        examples.push_back(e);
      }
      const Json plan = {
          {"model", folder.string()}, {"objective", "causal-lm"}, {"examples", examples_json}};
      Loaded m = load_model(f.plugin, folder);
      auto mask = load_mask("causal");
      auto tok = chinese_wordpiece();  // causal-lm reads no special tokens
      Objective objective({.kind = ObjectiveKind::causal_lm}, *tok, nullptr, {.inputs = mask.get()},
                          m.model->info());
      check_gradients(m, objective.lay_out(pointers(examples), 0), run_reference(plan, f.plugin));
    }
  }
}

TEST_CASE("gradients: the encoder-decoder, objective seq2seq (teacher forcing)") {
  const fs::path folder = test::shared_dir() / "models/aren-transliteration";
  Json examples_json = Json::array();
  std::vector<Example> examples;
  const int lengths[][2] = {{4, 5}, {2, 2}, {6, 3}};
  for (int i = 0; i < 3; ++i) {
    Example e;
    e.line = static_cast<std::uint64_t>(i + 1);
    e.ids = tokens(lengths[i][0], i, 51, 4);
    e.target = tokens(lengths[i][1], i + 5, 43, 4);
    examples_json.push_back({{"source", e.ids}, {"target", e.target}});
    examples.push_back(e);
  }
  const Json plan = {
      {"model", folder.string()}, {"objective", "seq2seq"}, {"examples", examples_json}};
  Loaded m = load_model("encoder-decoder", folder);
  auto causal = load_mask("causal");
  auto bidirectional = load_mask("bidirectional");
  auto tok = chinese_wordpiece();  // the layout reads the model's start and end tokens
  Objective objective({.kind = ObjectiveKind::seq2seq}, *tok, nullptr,
                      {.inputs = causal.get(), .source = bidirectional.get()}, m.model->info());
  check_gradients(m, objective.lay_out(pointers(examples), 0), run_reference(plan, "encdec"));
}

#include "trainer_support.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <numeric>

#include "masque/random.hpp"
#include "masque/transformer/model.hpp"
#include "test_support.hpp"

namespace masque::test::trainer {

namespace fs = std::filesystem;

ReferenceRun run_reference(const nlohmann::json& plan, const std::string& name, bool grads) {
  const fs::path dir = scratch_dir("reference_" + name);
  write_file(dir / "plan.json", plan.dump());
  std::string command = std::string(MASQUE_TORCH_PYTHON) + " " + MASQUE_SOURCE_DIR +
                        "/tests/trainer/reference_trainer.py " + (dir / "plan.json").string() +
                        " --losses " + (dir / "losses.jsonl").string();
  if (grads) command += " --grads " + (dir / "grads.safetensors").string();
  INFO(command);
  REQUIRE(std::system(command.c_str()) == 0);
  ReferenceRun run;
  run.steps = read_jsonl(dir / "losses.jsonl");
  if (grads) run.grads = SafeTensors::open(dir / "grads.safetensors");
  return run;
}

LoadedModel load_model(const std::string& plugin, const fs::path& folder) {
  Params p;
  p.set("path", folder.string());
  if (plugin == "bert") p.set("mlm_head", true);
  LoadedModel l{load_plugin<Model>("model", plugin, p), {}, {}};
  const auto* tm = dynamic_cast<const transformer::TransformerModel*>(l.model.get());
  REQUIRE(tm != nullptr);
  l.spec = tm->spec();
  l.params = train::ParameterSet::from_checkpoint(l.spec, transformer::open_checkpoint(folder));
  return l;
}

LoadedPlugin<Tokenizer> chinese_wordpiece() {
  Params p;
  p.set("path", "");
  p.set("vocab", (shared_dir() / "tokenizers/bert-base-chinese/vocab.txt").string());
  p.set("lowercase", "false");
  p.set("strip_accents", "false");
  p.set("max_chars_per_word", std::int64_t{100});
  p.set("split_special", true);
  return load_plugin<Tokenizer>("tokenizer", "wordpiece", p);
}

std::vector<const train::Example*> pointers(const std::vector<train::Example>& examples) {
  std::vector<const train::Example*> out;
  for (const train::Example& e : examples) out.push_back(&e);
  return out;
}

std::vector<TokenId> tokens(int n, int seed, int vocab, int low) {
  std::vector<TokenId> t;
  for (int i = 0; i < n; ++i) t.push_back(low + (seed * 131 + i * 71) % (vocab - low));
  return t;
}

namespace {

const nlohmann::json kBertSpecial = {{"cls", 101}, {"sep", 102}, {"mask", 103}};

train::Example example(std::uint64_t line) {
  train::Example e;
  e.line = line;
  return e;
}

}  // namespace

Case unilm_case(const std::string& mask, int n) {
  Case c{.name = "bert-" + mask,
         .plugin = "bert",
         .folder = shared_dir() / "models/tiny-bert-chinese",
         .objective = {.kind = train::ObjectiveKind::seq2seq},
         .mask = mask};
  nlohmann::json examples = nlohmann::json::array();
  for (int i = 0; i < n; ++i) {
    const auto src = tokens(2 + (i * 5) % 6, i, 21128, 670);
    const auto tgt = tokens(1 + (i * 3) % 4, i + 7, 21128, 670);
    examples.push_back({{"source", src}, {"target", tgt}});
    train::Example e = example(static_cast<std::uint64_t>(i + 1));
    e.ids.push_back(101);
    e.ids.insert(e.ids.end(), src.begin(), src.end());
    e.ids.push_back(102);
    e.segments.assign(e.ids.size(), 0);
    e.ids.insert(e.ids.end(), tgt.begin(), tgt.end());
    e.ids.push_back(102);
    e.segments.resize(e.ids.size(), 1);
    c.examples.push_back(e);
  }
  c.plan = {{"model", c.folder.string()},
            {"objective", "seq2seq"},
            {"mask", mask},
            {"special", kBertSpecial},
            {"examples", examples}};
  return c;
}

Case plm_case(int n) {
  Case c{.name = "bert-plm",
         .plugin = "bert",
         .folder = shared_dir() / "models/tiny-bert-chinese",
         .objective = {.kind = train::ObjectiveKind::plm, .plm_predict = 2},
         .mask = "permutation"};
  c.mask_params.set("stream", "query");
  c.mask_params.set("seed", std::int64_t{0});
  nlohmann::json examples = nlohmann::json::array();
  for (int i = 0; i < n; ++i) {
    train::Example e = example(static_cast<std::uint64_t>(i + 1));
    const int len = 3 + (i * 2) % 5;
    e.ids = tokens(len, i, 21128, 670);
    e.order.resize(len);
    std::iota(e.order.begin(), e.order.end(), 0);
    SplitMix64 rng(static_cast<std::uint64_t>(i) + 1);
    for (int k = len - 1; k > 0; --k)
      std::swap(e.order[k], e.order[rng.below(static_cast<std::uint64_t>(k) + 1)]);
    examples.push_back({{"ids", e.ids}, {"order", e.order}});
    c.examples.push_back(e);
  }
  c.plan = {{"model", c.folder.string()},
            {"objective", "plm"},
            {"plm_predict", 2},
            {"special", kBertSpecial},
            {"examples", examples}};
  return c;
}

Case diffusion_case(const std::string& mask, int n, int slack) {
  Case c{.name = "bert-diffusion-" + mask,
         .plugin = "bert",
         .folder = shared_dir() / "models/tiny-bert-chinese",
         .objective = {.kind = train::ObjectiveKind::diffusion,
                       .plm_target_slack = slack,
                       .diffusion_eps = 1e-3,
                       .seed = 3},
         .mask = mask};
  if (mask == "block-causal") c.mask_params.set("block_size", std::int64_t{2});
  nlohmann::json examples = nlohmann::json::array();
  for (int i = 0; i < n; ++i) {
    const auto src = tokens(2 + (i * 5) % 6, i, 21128, 670);
    const auto tgt = tokens(2 + (i * 3) % 5, i + 7, 21128, 670);
    const auto line = static_cast<std::uint64_t>(i + 1);
    examples.push_back({{"source", src}, {"target", tgt}, {"line", line}});
    train::Example e = example(line);
    e.ids.push_back(101);
    e.ids.insert(e.ids.end(), src.begin(), src.end());
    e.ids.push_back(102);
    e.segments.assign(e.ids.size(), 0);
    e.ids.insert(e.ids.end(), tgt.begin(), tgt.end());
    if (slack >= 0)
      e.ids.resize(src.size() + 2 + src.size() + static_cast<std::size_t>(slack), 102);
    e.segments.resize(e.ids.size(), 1);
    c.examples.push_back(e);
  }
  c.plan = {{"model", c.folder.string()},
            {"objective", "diffusion"},
            {"mask", mask},
            {"block_size", 2},
            {"seed", 3},
            {"diffusion_eps", 1e-3},
            {"plm_target_slack", slack},
            {"special", kBertSpecial},
            {"examples", examples}};
  return c;
}

Case causal_case(const std::string& plugin, int n) {
  const bool gpt2 = plugin == "gpt2";
  Case c{.name = plugin,
         .plugin = plugin,
         .folder = shared_dir() / "models" / (gpt2 ? "tiny-gpt2" : "stories260k"),
         .objective = {.kind = train::ObjectiveKind::causal_lm},
         .mask = "causal"};
  nlohmann::json examples = nlohmann::json::array();
  for (int i = 0; i < n; ++i) {
    train::Example e = example(static_cast<std::uint64_t>(i + 1));
    e.ids = tokens(4 + (i * 3) % 7, i, gpt2 ? 50257 : 512, 3);
    examples.push_back({{"ids", e.ids}});
    c.examples.push_back(e);
  }
  c.plan = {{"model", c.folder.string()}, {"objective", "causal-lm"}, {"examples", examples}};
  return c;
}

Case encdec_case(int n) {
  Case c{.name = "encdec",
         .plugin = "encoder-decoder",
         .folder = shared_dir() / "models/aren-transliteration",
         .objective = {.kind = train::ObjectiveKind::seq2seq},
         .mask = "causal",
         .source_mask = "bidirectional"};
  nlohmann::json examples = nlohmann::json::array();
  for (int i = 0; i < n; ++i) {
    train::Example e = example(static_cast<std::uint64_t>(i + 1));
    e.ids = tokens(2 + (i * 3) % 6, i, 51, 4);
    e.target = tokens(2 + (i * 2) % 5, i + 5, 43, 4);
    examples.push_back({{"source", e.ids}, {"target", e.target}});
    c.examples.push_back(e);
  }
  c.plan = {{"model", c.folder.string()}, {"objective", "seq2seq"}, {"examples", examples}};
  return c;
}

CaseObjective make_objective(const Case& c, const ModelInfo& info) {
  CaseObjective o;
  // Only seq2seq, mlm and plm on one model read special tokens; the others need some tokenizer.
  o.tokenizer = chinese_wordpiece();
  o.mask = load_mask(c.mask, c.mask_params);
  if (!c.source_mask.empty()) o.source_mask = load_mask(c.source_mask);
  o.objective = std::make_unique<train::Objective>(
      c.objective, *o.tokenizer, nullptr,
      train::ObjectiveMasks{.inputs = o.mask.get(), .source = o.source_mask.get()}, info);
  return o;
}

}  // namespace masque::test::trainer

// masque attention: what the network attends to, as an SVG heatmap (and JSON): the attention
// probabilities of one layer's heads over a text, under the pipeline's mask strategy, next to
// what that mask allows. The probabilities are the ones the model computes in its forward pass
// (AttentionRecording, masque/model.hpp), not a re-implementation.
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "common.hpp"
#include "heatmap_svg.hpp"
#include "masque/error.hpp"
#include "masque/mask.hpp"
#include "tasks/common.hpp"
#include "tasks/task.hpp"

namespace fs = std::filesystem;

namespace masque::cli {

namespace {

const char* kHelp = R"(Usage: masque attention PIPELINE TEXT [options]

Runs the pipeline's model on TEXT under the pipeline's mask strategy and draws the attention
probabilities of a layer: one head (--head N) or every head of the layer as a grid. Rows are
queries, columns keys, both labelled with the tokens; masked cells are grey (the mask's
pattern, as `masque mask` draws it), allowed ones darker for more attention. Each row of
allowed cells sums to 1. Models: decoder-only and encoder-only (BERT-like) ones.

TEXT for the seq2seq mask is "SOURCE<TAB>TARGET" (segments 0 and 1, as the UniLM route sees
them); other strategies take one text.

Examples:
  masque attention pipelines/lm-score.yaml "Once upon a time" -o attention.svg
  masque attention pipelines/seq2seq-unilm.yaml $'你想吃啥\t白切鸡' --layer 0 --head 1 -o a.svg
  masque attention pipelines/plm-score.yaml "北京欢迎你" --json > attention.json
  masque attention pipelines/lm-score.yaml "Once upon" --set mask.plugin=bidirectional -o b.svg
)";

struct Tokens {
  std::vector<TokenId> ids;
  std::vector<std::int32_t> types;  // token types = segments
  std::vector<std::string> labels;
};

// The text's tokens as the pipeline's task would give them (special tokens included); for the
// seq2seq mask "source<TAB>target" becomes segments 0 and 1.
Tokens tokenize(const Tokenizer& tokenizer, const std::string& text, bool pair) {
  Encoding e;
  const std::size_t tab = text.find('\t');
  if (pair) {
    if (tab == std::string::npos)
      throw ConfigError("the seq2seq mask needs TEXT as \"SOURCE<TAB>TARGET\"");
    const std::string first = text.substr(0, tab), second = text.substr(tab + 1);
    try {
      e = tokenizer.encode_pair(first, second, true);
    } catch (const ConfigError&) {  // no pair template: source with specials, then the target
      e = tokenizer.encode(first, true);
      Encoding t = tokenizer.encode(second, false);
      e.type_ids.assign(e.ids.size(), 0);
      e.ids.insert(e.ids.end(), t.ids.begin(), t.ids.end());
      e.pieces.insert(e.pieces.end(), t.pieces.begin(), t.pieces.end());
      e.type_ids.resize(e.ids.size(), 1);
    }
  } else {
    e = tokenizer.encode(text, true);
  }
  if (e.ids.empty()) throw ConfigError("TEXT gives no tokens");
  Tokens t{e.ids, e.type_ids, e.pieces};
  if (t.types.size() != t.ids.size()) t.types.assign(t.ids.size(), 0);
  for (std::size_t i = 0; i < t.labels.size(); ++i)
    if (t.labels[i].empty()) t.labels[i] = tokenizer.id_to_piece(t.ids[i]);
  t.labels.resize(t.ids.size());
  return t;
}

nlohmann::ordered_json to_json(const std::string& strategy, std::int32_t layer,
                               const std::vector<std::int32_t>& heads, const Heatmap& map) {
  const std::size_t n = map.labels.size();
  nlohmann::ordered_json j;
  j["strategy"] = strategy;
  j["layer"] = layer;
  j["heads"] = heads;
  j["tokens"] = map.labels;
  auto allowed = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < n; ++i) {
    auto row = nlohmann::ordered_json::array();
    for (std::size_t k = 0; k < n; ++k) row.push_back(map.allowed[i * n + k]);
    allowed.push_back(row);
  }
  j["allowed"] = allowed;
  auto attention = nlohmann::ordered_json::array();  // [head][query][key]
  for (const HeatmapPanel& p : map.panels) {
    auto rows = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < n; ++i)
      rows.push_back(
          std::vector<float>(p.values.begin() + static_cast<std::ptrdiff_t>(i * n),
                             p.values.begin() + static_cast<std::ptrdiff_t>((i + 1) * n)));
    attention.push_back(rows);
  }
  j["attention"] = attention;
  return j;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw ConfigError("-o " + path + ": cannot open the file for writing");
  out << text;
  if (!out.flush()) throw RuntimeError("-o " + path + ": writing failed");
}

}  // namespace

int cmd_attention(int argc, char** argv) {
  po::options_description o("Options");
  o.add_options()("help,h", "this help")(
      "layer", po::value<std::int32_t>()->default_value(-1),
      "the layer whose self-attention is drawn (negative: from the end; -1 = the last)")(
      "head", po::value<std::int32_t>(), "one head (0-based); default: every head, as a grid")(
      "output,o", po::value<std::string>(), "write the SVG to this file (default: stdout)")(
      "json", po::bool_switch(),
      "print the numbers as JSON on stdout ({strategy, layer, heads, tokens, allowed, "
      "attention[head][query][key]}); the SVG then needs -o")(
      "set,s", po::value<std::vector<std::string>>()->composing(),
      "section.key=value: override a pipeline setting (repeatable), e.g. mask.plugin=causal")(
      "columns", po::value<std::int32_t>()->default_value(4), "panels per line of the grid")(
      "allow-plugin-file", po::bool_switch(), "allow plugins given as library files");
  po::options_description hidden;
  hidden.add_options()("pipeline", po::value<std::string>())("text", po::value<std::string>());
  po::positional_options_description pos;
  pos.add("pipeline", 1).add("text", 1);
  po::variables_map vm = parse(argc, argv, o, hidden, pos);
  if (vm.count("help")) {
    std::cout << kHelp << "\n" << o << "\n";
    return kExitOk;
  }
  if (!vm.count("pipeline") || !vm.count("text"))
    throw ConfigError("masque attention: give a PIPELINE and a TEXT (see masque attention --help)");
  if (vm["columns"].as<std::int32_t>() < 1)
    throw ConfigError("--columns: expected 1 or more panels per line, got " +
                      std::to_string(vm["columns"].as<std::int32_t>()));
  const bool json = vm["json"].as<bool>();

  LoadOptions load;
  load.require_task = false;
  load.allow_plugin_files = vm["allow-plugin-file"].as<bool>();
  if (vm.count("set")) load.sets = vm["set"].as<std::vector<std::string>>();
  auto registry = open_registry(true);
  Pipeline pipeline =
      load_pipeline_file(vm["pipeline"].as<std::string>(), load, *registry, task_specs());
  for (const char* section : {"model", "tokenizer", "mask"})
    if (!pipeline.has(section))
      throw ConfigError(std::string("masque attention: the pipeline has no `") + section +
                        "` section (the attention is drawn under the pipeline's mask strategy)");
  Plugins plugins = create_plugins(pipeline, *registry);
  const Model& model = *plugins.model;
  if (!model.info().records_attention)
    throw ConfigError("masque attention: the " + model.info().architecture +
                      " model cannot show its attention");
  if (model.info().kind == ModelKind::encoder_decoder)
    throw ConfigError(
        "masque attention: an encoder-decoder's attention to its source is the "
        "seq2seq task's return_attention (this command draws one stack's "
        "self-attention under a mask strategy)");

  const std::string strategy = pipeline.at("mask").entry->descriptor->name;
  const Tokens tokens =
      tokenize(*plugins.tokenizer, vm["text"].as<std::string>(), strategy == "seq2seq");
  SequenceSpec spec;
  spec.ids = tokens.ids;
  spec.token_types = tokens.types;
  spec.segments = tokens.types;
  const TokenId query_token = plugins.tokenizer->special_tokens().mask;
  BuiltBatch built = build_batch(std::span(&spec, 1), *plugins.mask, model.info().pad, query_token);
  if (query_token < 0 && !built.masks.front().query_positions.empty())
    throw ConfigError(
        "masque attention: the mask strategy appends query tokens, fed as [MASK], "
        "and the tokenizer has no mask token");

  const std::int32_t heads = model.info().num_heads;
  std::int32_t first = 0, count = 0;  // 0: every head
  if (vm.count("head")) {
    first = vm["head"].as<std::int32_t>();
    if (first < 0 || first >= heads)
      throw ConfigError("--head: " + std::to_string(first) + " is not a head of the model (0.." +
                        std::to_string(heads - 1) + ")");
    count = 1;
  }
  Tensor probs;
  const AttentionRecording record{.layer = vm["layer"].as<std::int32_t>(),
                                  .cross = false,
                                  .first_head = first,
                                  .heads = count,
                                  .probs = &probs};
  built.batch.record_attention = &record;
  built.batch.want_logits = false;
  model.forward(built.batch);

  Heatmap map;
  const SequenceMask& mask = built.masks.front();
  const std::size_t n = mask.size();
  map.labels = tokens.labels;
  for (std::int32_t p : mask.query_positions)
    map.labels.push_back("?" + (static_cast<std::size_t>(p) < tokens.labels.size()
                                    ? tokens.labels[static_cast<std::size_t>(p)]
                                    : std::to_string(p)));
  map.labels.resize(n);
  map.allowed = allowed_cells(mask);
  map.columns = vm["columns"].as<std::int32_t>();
  const std::int32_t layer =
      record.layer < 0 ? record.layer + model.info().num_layers : record.layer;
  map.title = model.info().architecture + ", layer " + std::to_string(layer) + ", mask " + strategy;
  std::vector<std::int32_t> head_ids;
  const auto recorded = static_cast<std::int32_t>(probs.dim(0));
  const std::int64_t length = built.batch.length;
  for (std::int32_t h = 0; h < recorded; ++h) {
    HeatmapPanel p{.title = "head " + std::to_string(first + h), .head = first + h, .values = {}};
    const float* data = probs.f32() + h * length * length;  // batch of one row
    for (std::size_t i = 0; i < n; ++i)
      p.values.insert(p.values.end(), data + i * length, data + i * length + n);
    map.panels.push_back(std::move(p));
    head_ids.push_back(first + h);
  }

  const std::string svg = render_svg(map);
  if (vm.count("output")) write_text(vm["output"].as<std::string>(), svg);
  if (json)
    std::cout << to_json(strategy, layer, head_ids, map).dump() << "\n";
  else if (!vm.count("output"))
    std::cout << svg;
  return kExitOk;
}

}  // namespace masque::cli

// masque inspect DIR: what a model folder holds and what masque can do with it.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common.hpp"
#include "io/read_file.hpp"
#include "masque/error.hpp"
#include "masque/model.hpp"
#include "masque/tokenizer.hpp"
#include "masque/transformer/model.hpp"
#include "masque/transformer/quantized_folder.hpp"
#include "model_folder.hpp"
#include "tasks/task.hpp"
#include "tokenizer_files.hpp"

namespace masque::cli {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

const char* kHelp = R"(Usage: masque inspect DIR [--tokenizer DIR] [--matmul-dtype TYPE] [--json]

Describes a model folder: its architecture (config.json), the model plugin that serves it, the
parameter count, the tensors' dtypes and total size, the vocabulary size, the maximum number of
positions, the special tokens, the tokenizer its files name, the output head it holds (the
vocabulary's logits, a classifier's labels, or none: an encoder alone), the tasks it can run with
`masque run --task TASK --model DIR` (and why the others cannot: unavailable_tasks), and the
type each linear layer's matmul runs in when the model is loaded with
`model.matmul_dtype=TYPE` (int8 keeps narrow layers f32; --json lists them). The model is
loaded, so a folder that passes also runs.

Examples:
  masque inspect ../shared/models/stories260k
  masque inspect ../shared/models/tiny-gpt2 --tokenizer ../shared/tokenizers/gpt2 --json
  masque inspect ../shared/models/aren-transliteration --matmul-dtype int8   # too small: all f32
)";

// The matmul_dtype parameter of `plugin`, or null when it has none.
const ParamSpec* matmul_dtype_param(const PluginDescriptor& plugin) {
  for (std::uint32_t i = 0; i < plugin.num_params; ++i)
    if (std::string_view(plugin.params[i].name) == "matmul_dtype") return &plugin.params[i];
  return nullptr;
}

// The linear layers' matmul types: the one-line summary, counts, and each layer.
json matmuls_json(const Model& model, const std::string& asked) {
  const LinearList layers = model.linear_layers();
  if (layers.empty()) return nullptr;
  json list = json::array();
  std::map<std::string, int> counts;
  for (const auto& [name, linear] : layers) {
    // The names matmul_dtype takes.
    const DType compute = linear->compute();
    const std::string type = compute == DType::i8     ? "int8"
                             : compute == DType::i4   ? "int4"
                             : compute == DType::bf16 ? "bf16"
                                                      : "f32";
    ++counts[type];
    list.push_back({{"name", name},
                    {"in", linear->in_features()},
                    {"out", linear->out_features()},
                    {"dtype", type}});
  }
  std::uint64_t held = 0;
  for (const auto& [name, linear] : layers) held += linear->weight_bytes();
  json j{{"asked", asked},
         {"summary", matmul_summary(layers)},
         {"held_bytes", held},
         {"layers", layers.size()},
         {"by_dtype", counts}};
  if (asked == "int8" || asked == "int4")
    j["int8_rule"] = {{"min_inputs", kInt8MinInputs},
                      {"min_outputs", kInt8MinOutputs},
                      {"min_weights", kInt8MinWeights}};
  j["list"] = list;
  return j;
}

std::string human_bytes(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char text[32];
  std::snprintf(text, sizeof text, u ? "%.2f %s" : "%.0f %s", v, units[u]);
  return text;
}

// Parameter count, dtypes and bytes of the folder's safetensors checkpoint.
json weights_json(const fs::path& dir) {
  const SafeTensors weights = transformer::open_checkpoint(dir);
  std::uint64_t parameters = 0, bytes = 0;
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> by_dtype;  // tensors, bytes
  std::set<std::string> files;
  for (const auto& name : weights.names()) {
    const SafeTensorEntry& e = weights.entry(name);
    std::uint64_t count = 1;
    for (auto d : e.shape) count *= static_cast<std::uint64_t>(d);
    // A quantized weight (masque quantize): its values count, two to a byte for int4; its
    // scales are not parameters.
    const std::string_view n(name);
    auto base_of = [&](std::string_view suffix) {
      return n.size() > suffix.size() && n.substr(n.size() - suffix.size()) == suffix
                 ? std::string(n.substr(0, n.size() - suffix.size()))
                 : std::string();
    };
    if (const std::string w = base_of("_scale");
        !w.empty() && weights.contains(transformer::quantized_values_name(w)))
      count = 0;
    else if (!base_of("_quantized").empty() && e.dtype_name == "U8")
      count *= 2;
    parameters += count;
    bytes += e.size;
    by_dtype[e.dtype_name].first += 1;
    by_dtype[e.dtype_name].second += e.size;
    files.insert(e.file.filename().string());
  }
  json dtypes = json::object();
  for (const auto& [dtype, figures] : by_dtype)
    dtypes[dtype] = {{"tensors", figures.first}, {"bytes", figures.second}};
  return {{"files", files},
          {"tensors", weights.size()},
          {"parameters", parameters},
          {"bytes", bytes},
          {"dtypes", dtypes}};
}

// The tokenizer the folder's files name, created, or null (with the reason in `j`).
std::unique_ptr<Tokenizer> open_tokenizer(const fs::path& dir, const Registry& registry, json& j) {
  const auto sections = tok::pick_tokenizer_sections(registry, dir);
  if (sections.empty()) {
    j = {{"error", "no tokenizer files in " + dir.string() + " (use --tokenizer DIR)"}};
    return nullptr;
  }
  const auto& s = sections.front();
  const PluginEntry& entry = registry.find(PluginKind::tokenizer, s.plugin);
  Params params = default_params(*entry.descriptor);
  params.set(s.key, (s.file.empty() ? dir : dir / s.file).string());
  std::unique_ptr<Plugin> plugin = registry.create(entry, params);
  auto tokenizer = std::unique_ptr<Tokenizer>(static_cast<Tokenizer*>(plugin.release()));
  j = {{"plugin", s.plugin},
       {"files", s.file.empty() ? tok::pick_tokenizer(registry, dir)->file : s.file},
       {"vocab_size", tokenizer->vocab_size()}};
  if (sections.size() > 1) j["target_files"] = sections[1].file;
  return tokenizer;
}

json special_tokens_json(const ModelInfo& info, const Tokenizer* tokenizer) {
  json j = json::object();
  auto add = [&](const char* name, TokenId id) {
    if (id < 0) return;
    json t{{"id", id}};
    if (tokenizer) t["piece"] = tokenizer->id_to_piece(id);
    j[name] = t;
  };
  add("bos", info.bos);
  add("eos", info.eos);
  add("pad", info.pad);
  add("decoder_start", info.decoder_start);
  add("forced_bos", info.forced_bos);
  // The other ids that end generation (an eos_token_id list): end_1, end_2, ...
  for (std::size_t i = 1; i < info.end_ids.size(); ++i)
    add(("end_" + std::to_string(i)).c_str(), info.end_ids[i]);
  if (tokenizer) {
    const SpecialTokens& s = tokenizer->special_tokens();
    for (auto [name, id] :
         {std::pair{"unk", s.unk}, {"mask", s.mask}, {"cls", s.cls}, {"sep", s.sep}})
      if (!j.contains(name)) add(name, id);
  }
  return j;
}

// The tasks `masque run --task T --model DIR` can run: each one's pipeline is built from the
// folder, its other plugins created, the loaded model lent and the task configured, as `run`
// does. What fails is listed in `unavailable` with the reason.
json tasks_json(const fs::path& dir, const fs::path& tokenizer_dir, std::unique_ptr<Plugin>& model,
                Registry& registry, json& unavailable) {
  json tasks = json::array();
  unavailable = json::object();
  for (const TaskSpec& t : task_specs()) {
    const auto& r = t.required_sections;
    if (std::find(r.begin(), r.end(), "model") == r.end()) continue;
    Plugins plugins;
    try {
      const FolderRequest request{
          .task = t.name,
          .model_dir = dir,
          .tokenizer_dir = tokenizer_dir != dir ? tokenizer_dir : fs::path()};
      const std::string yaml = folder_pipeline_yaml(request, registry, task_specs());
      Pipeline pipeline = load_pipeline({yaml, "--model " + dir.string(), fs::current_path()}, {},
                                        registry, task_specs());
      // The model is loaded once, above: create the other plugins without it.
      auto section = pipeline.plugins.extract("model");
      plugins = create_plugins(pipeline, registry);
      pipeline.plugins.insert(std::move(section));
      plugins.model.reset(static_cast<Model*>(model.release()));
      create_task(pipeline, plugins);
      tasks.push_back(t.name);
    } catch (const std::exception& e) {
      unavailable[t.name] = e.what();
    }
    if (plugins.model) model.reset(plugins.model.release());
  }
  return tasks;
}

// The output head the folder holds: the vocabulary's logits (an LM or MLM head), a
// classifier's labels (*ForSequenceClassification), or none (an encoder alone: hidden states).
json head_json(const Model& model, const FolderArchitecture& architecture) {
  std::int64_t outputs = -1;
  for (const auto& [name, linear] : model.linear_layers())
    if (name == "head.output") outputs = linear->out_features();
  if (outputs < 0 && model.linear_layers().empty()) return nullptr;  // not a Transformer tier
  bool labels = false;
  for (const std::string& a : architecture.architectures)
    labels = labels || a.find("ForSequenceClassification") != std::string::npos;
  if (outputs < 0) return {{"kind", "none"}};
  return {{"kind", labels ? "labels" : "vocabulary"}, {"outputs", outputs}};
}

json inspect(const fs::path& dir, const fs::path& tokenizer_dir, const std::string& matmul_dtype,
             Registry& registry) {
  const FolderArchitecture architecture = read_architecture(dir);
  const PluginEntry& plugin = model_plugin_for(dir, registry);
  json j;
  j["folder"] = dir.string();
  j["model_type"] = architecture.model_type;
  j["architectures"] = architecture.architectures;
  j["plugin"] = plugin.descriptor->name;
  j["weights"] = weights_json(dir);
  {
    const fs::path config_file = dir / "config.json";
    const json config = json::parse(io::read_file(config_file, "model config"), nullptr, false);
    if (config.is_object())
      if (const auto q = transformer::read_quantization(config, config_file))
        j["quantization"] = transformer::quantization_json(*q);
  }
  json tokenizer_info;
  const auto tokenizer = open_tokenizer(tokenizer_dir, registry, tokenizer_info);
  Params params = default_params(*plugin.descriptor);
  params.set("path", dir.string());
  if (!matmul_dtype.empty()) {
    const ParamSpec* spec = matmul_dtype_param(*plugin.descriptor);
    if (!spec)
      throw ConfigError("masque inspect: --matmul-dtype: the model plugin '" +
                        std::string(plugin.descriptor->name) + "' has no matmul_dtype parameter");
    try {
      params.set("matmul_dtype", parse_param_value(*spec, matmul_dtype));
    } catch (const ConfigError& e) {
      throw ConfigError(std::string("masque inspect: --matmul-dtype: ") + e.what());
    }
  }
  std::unique_ptr<Plugin> created = registry.create(plugin, params);
  const ModelInfo& info = static_cast<Model&>(*created).info();
  j["kind"] = model_kind_name(info.kind);
  j["vocab_size"] = info.vocab_size;
  if (info.source_vocab_size != info.vocab_size) j["source_vocab_size"] = info.source_vocab_size;
  j["hidden_size"] = info.hidden_size;
  j["layers"] = info.num_layers;
  j["max_positions"] = info.max_positions;
  j["special_tokens"] = special_tokens_json(info, tokenizer.get());
  j["tokenizer"] = tokenizer_info;
  json unavailable;
  j["tasks"] = tasks_json(dir, tokenizer_dir, created, registry, unavailable);
  if (!unavailable.empty()) j["unavailable_tasks"] = unavailable;
  const json matmuls =
      matmuls_json(static_cast<Model&>(*created), matmul_dtype.empty() ? "auto" : matmul_dtype);
  if (!matmuls.is_null()) j["matmuls"] = matmuls;
  j["head"] = head_json(static_cast<Model&>(*created), architecture);
  return j;
}

std::string join(const json& list) {
  std::string text;
  for (const auto& v : list) text += (text.empty() ? "" : ", ") + v.get<std::string>();
  return text;
}

void print_text(const json& j) {
  const json& w = j["weights"];
  std::printf("folder          %s\n", j["folder"].get<std::string>().c_str());
  std::printf("architecture    %s%s%s\n", j["model_type"].get<std::string>().c_str(),
              j["model_type"].get<std::string>().empty() ? "" : " ",
              j["architectures"].empty() ? "" : ("(" + join(j["architectures"]) + ")").c_str());
  std::printf("plugin          %s (%s)\n", j["plugin"].get<std::string>().c_str(),
              j["kind"].get<std::string>().c_str());
  std::printf("parameters      %llu in %llu tensors (%s)\n",
              static_cast<unsigned long long>(w["parameters"].get<std::uint64_t>()),
              static_cast<unsigned long long>(w["tensors"].get<std::uint64_t>()),
              join(w["files"]).c_str());
  std::string dtypes;
  for (const auto& [dtype, f] : w["dtypes"].items())
    dtypes += (dtypes.empty() ? "" : ", ") + dtype + " " + std::to_string(f["tensors"].get<int>()) +
              " tensors " + human_bytes(f["bytes"].get<std::uint64_t>());
  std::printf("dtypes          %s; total %s\n", dtypes.c_str(),
              human_bytes(w["bytes"].get<std::uint64_t>()).c_str());
  if (j.contains("quantization")) {
    const json& q = j["quantization"];
    std::printf("quantized       %s%s by masque quantize: %lld linear layers, %lld kept f32\n",
                q["dtype"].get<std::string>().c_str(),
                q.contains("group_size")
                    ? (" in groups of " + std::to_string(q["group_size"].get<int>())).c_str()
                    : "",
                q["quantized_layers"].get<long long>(), q["kept_layers"].get<long long>());
  }
  std::printf("layers          %d, hidden size %d\n", j["layers"].get<int>(),
              j["hidden_size"].get<int>());
  std::string vocab = std::to_string(j["vocab_size"].get<int>());
  if (j.contains("source_vocab_size"))
    vocab = "source " + std::to_string(j["source_vocab_size"].get<int>()) + ", target " + vocab;
  std::printf("vocabulary      %s\n", vocab.c_str());
  const int positions = j["max_positions"].get<int>();
  std::printf("max positions   %s\n", positions ? std::to_string(positions).c_str() : "unlimited");
  std::string specials;
  for (const auto& [name, t] : j["special_tokens"].items()) {
    specials += (specials.empty() ? "" : ", ") + name + " " + std::to_string(t["id"].get<int>());
    if (t.contains("piece")) specials += " " + json(t["piece"]).dump();
  }
  std::printf("special tokens  %s\n", specials.empty() ? "(none)" : specials.c_str());
  const json& t = j["tokenizer"];
  if (t.contains("error"))
    std::printf("tokenizer       none: %s\n", t["error"].get<std::string>().c_str());
  else
    std::printf("tokenizer       %s (%s%s), %d tokens\n", t["plugin"].get<std::string>().c_str(),
                t["files"].get<std::string>().c_str(),
                t.contains("target_files")
                    ? (", target " + t["target_files"].get<std::string>()).c_str()
                    : "",
                t["vocab_size"].get<int>());
  if (j.contains("head") && !j["head"].is_null()) {
    const json& h = j["head"];
    const std::string kind = h["kind"];
    std::printf(
        "head            %s\n",
        kind == "none" ? "none: the encoder alone (hidden states: embed)"
        : kind == "labels"
            ? (std::to_string(h["outputs"].get<int>()) + " labels (classify)").c_str()
            : ("the vocabulary's " + std::to_string(h["outputs"].get<int>()) + " logits").c_str());
  }
  std::printf("tasks           %s\n", j["tasks"].empty() ? "(none)" : join(j["tasks"]).c_str());
  // Tasks that cannot run for the same reason (a folder without a tokenizer: all of them) share
  // a line.
  std::vector<std::pair<std::string, json>> by_reason;
  const json unavailable = j.value("unavailable_tasks", json::object());
  for (const auto& [task, reason] : unavailable.items()) {
    const std::string why = reason.get<std::string>();
    const auto same = std::find_if(by_reason.begin(), by_reason.end(),
                                   [&](const auto& entry) { return entry.first == why; });
    if (same == by_reason.end())
      by_reason.emplace_back(why, json::array({task}));
    else
      same->second.push_back(task);
  }
  const char* label = "not runnable    ";  // on the first line only
  for (const auto& [why, tasks] : by_reason) {
    std::printf("%s%s: %s\n", label, join(tasks).c_str(), why.c_str());
    label = "                ";
  }
  if (j.contains("matmuls")) {
    std::printf("matmuls         %s\n", j["matmuls"]["summary"].get<std::string>().c_str());
    // What the loaded model holds beside the mapped file (its embedding rows come from there).
    std::printf("weights held    %s in the linear layers (packed); embeddings read in place\n",
                human_bytes(j["matmuls"]["held_bytes"].get<std::uint64_t>()).c_str());
  }
}

}  // namespace

int cmd_inspect(int argc, char** argv) {
  po::options_description o("Options");
  o.add_options()("help,h", "this help")("tokenizer", po::value<std::string>(),
                                         "the folder holding the tokenizer files (default: DIR)")(
      "json", po::bool_switch(), "print one JSON object instead of the text")(
      "matmul-dtype", po::value<std::string>(),
      "load the model with this matmul_dtype (f32, bf16, int8 or int4) and report the type each "
      "linear "
      "layer runs in");
  po::options_description hidden;
  hidden.add_options()("dir", po::value<std::string>());
  po::positional_options_description pos;
  pos.add("dir", 1);
  po::variables_map vm = parse(argc, argv, o, hidden, pos);
  if (vm.count("help")) {
    std::cout << kHelp << "\n" << o << "\n";
    return kExitOk;
  }
  if (!vm.count("dir"))
    throw ConfigError("masque inspect: missing DIR (see masque inspect --help)");
  const fs::path dir = fs::absolute(vm["dir"].as<std::string>()).lexically_normal();
  const fs::path tokenizer_dir =
      vm.count("tokenizer") ? fs::absolute(vm["tokenizer"].as<std::string>()).lexically_normal()
                            : dir;
  auto registry = open_registry(false);
  const std::string matmul_dtype =
      vm.count("matmul-dtype") ? vm["matmul-dtype"].as<std::string>() : "";
  const json j = inspect(dir, tokenizer_dir, matmul_dtype, *registry);
  if (vm["json"].as<bool>())
    std::cout << j.dump(2) << "\n";
  else
    print_text(j);
  return kExitOk;
}

}  // namespace masque::cli

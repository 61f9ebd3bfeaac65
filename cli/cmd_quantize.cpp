// masque quantize DIR --to int8|int4 -o OUT: a model folder with its matmul weights quantized,
// which loads without quantizing again (masque/transformer/quantized_folder.hpp).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common.hpp"
#include "io/read_file.hpp"
#include "masque/error.hpp"
#include "masque/transformer/model.hpp"
#include "masque/transformer/quantized_folder.hpp"
#include "model_folder.hpp"

namespace masque::cli {

namespace fs = std::filesystem;

namespace {

const char* kHelp = R"(Usage: masque quantize DIR --to int8|int4 [--group-size N] -o OUT

Writes OUT, a copy of the model folder DIR whose linear layers' weights are stored quantized as
masque quantizes them at load with `model.matmul_dtype=int8|int4` (the same layers: int8's rule
keeps narrow layers f32; the same bits: outputs are identical to loading DIR with that
matmul_dtype). OUT loads in about the time it takes to map its files, in the same memory, and
runs in that type (matmul_dtype auto); its config.json says so in a `quantization` entry
(docs/precision.md). Embeddings, norms and biases keep the source's dtype; tokenizer files and
the other files of DIR are copied; other weight formats (*.bin, *.gguf, ...) are not. OUT must
not exist; it is written as OUT.partial and renamed when whole.

int8 weights are quantized to this CPU's int8 levels (127 with VNNI, 63 without); a folder made
with 127 levels still loads on a CPU without VNNI, quantized again there (so its outputs match
that CPU's load-time quantization of the 127-level values, not of DIR).

Examples:
  masque quantize ../shared/models/stories260k --to int8 -o /tmp/stories-int8
  masque quantize qwen2.5-0.5b --to int4 -o qwen2.5-0.5b-int4
  echo "Once upon a time" | masque run --task lm-score --model /tmp/stories-int8
)";

// "1.2 GB"
std::string bytes_text(std::uint64_t bytes) {
  char text[32];
  if (bytes >= (1ull << 30))
    std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1ull << 30));
  else
    std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1ull << 20));
  return text;
}

}  // namespace

int cmd_quantize(int argc, char** argv) {
  po::options_description o("Options");
  o.add_options()("help,h", "this help")("to", po::value<std::string>(),
                                         "the type: int8 or int4 (required)")(
      "group-size", po::value<int>()->default_value(32),
      "int4: inputs that share one scale (a multiple of 32 that divides each layer's inputs; "
      "layers whose inputs it does not divide stay f32)")(
      "output,o", po::value<std::string>(), "the folder to write (must not exist; required)")(
      "max-shard-size", po::value<double>()->default_value(4.0),
      "GiB of tensors per safetensors file; more are written as shards with an index")(
      "quiet,q", po::bool_switch(), "no progress on stderr");
  po::options_description hidden;
  hidden.add_options()("dir", po::value<std::string>());
  po::positional_options_description pos;
  pos.add("dir", 1);
  po::variables_map vm = parse(argc, argv, o, hidden, pos);
  if (vm.count("help")) {
    std::cout << kHelp << "\n" << o << "\n";
    return kExitOk;
  }
  if (!vm.count("dir")) throw ConfigError("masque quantize: missing DIR (see --help)");
  if (!vm.count("to")) throw ConfigError("masque quantize: missing --to int8|int4");
  if (!vm.count("output")) throw ConfigError("masque quantize: missing -o OUT");
  const std::string to = vm["to"].as<std::string>();
  if (to != "int8" && to != "int4")
    throw ConfigError("masque quantize: --to: '" + to + "' is neither int8 nor int4");
  const int group = vm["group-size"].as<int>();
  if (to == "int4" && (group < 32 || group % 32 != 0 || group > 4096))
    throw ConfigError("masque quantize: --group-size: " + std::to_string(group) +
                      " is not a multiple of 32 in [32, 4096]");
  const double shard_gib = vm["max-shard-size"].as<double>();
  if (!(shard_gib > 0.0)) throw ConfigError("masque quantize: --max-shard-size must be positive");
  const fs::path dir = fs::absolute(vm["dir"].as<std::string>()).lexically_normal();
  const fs::path out = fs::absolute(vm["output"].as<std::string>()).lexically_normal();
  const bool quiet = vm["quiet"].as<bool>();
  std::error_code ec;
  if (fs::exists(out, ec)) throw ConfigError("masque quantize: " + out.string() + ": exists");
  const auto started = std::chrono::steady_clock::now();
  {
    const fs::path config_file = dir / "config.json";
    const nlohmann::json config =
        nlohmann::json::parse(io::read_file(config_file, "model config"), nullptr, false);
    if (config.is_object() && transformer::read_quantization(config, config_file))
      throw ConfigError("masque quantize: " + config_file.string() +
                        ": the folder is already quantized (its `quantization` entry); quantize "
                        "the original folder");
  }

  // The model, loaded as a run with that matmul_dtype would load it: its spec names the
  // matmuls (and the config errors are a run's).
  auto registry = open_registry(quiet);
  const PluginEntry& plugin = model_plugin_for(dir, *registry);
  Params params = default_params(*plugin.descriptor);
  params.set("path", dir.string());
  bool has_type = false, has_group = false;
  for (std::uint32_t i = 0; i < plugin.descriptor->num_params; ++i) {
    const ParamSpec& p = plugin.descriptor->params[i];
    if (std::string_view(p.name) == "matmul_dtype") {
      params.set("matmul_dtype", parse_param_value(p, to));
      has_type = true;
    }
    if (std::string_view(p.name) == "int4_group_size" && to == "int4") {
      params.set("int4_group_size", parse_param_value(p, std::to_string(group)));
      has_group = true;
    }
  }
  if (!has_type || (to == "int4" && !has_group))
    throw ConfigError("masque quantize: the model plugin '" + std::string(plugin.descriptor->name) +
                      "' has no " + (has_type ? "int4_group_size" : "matmul_dtype") +
                      " parameter: it cannot run quantized weights");
  if (!quiet) std::fprintf(stderr, "masque quantize: reading %s\n", dir.string().c_str());
  transformer::TransformerSpec spec;
  {
    std::unique_ptr<Plugin> created = registry->create(plugin, params);
    const auto* model = dynamic_cast<const transformer::TransformerModel*>(created.get());
    if (!model)
      throw ConfigError("masque quantize: the model plugin '" +
                        std::string(plugin.descriptor->name) +
                        "' is not built on the Transformer tier; masque quantize writes "
                        "Transformer folders only");
    spec = model->spec();
  }  // the model goes: its memory is not needed while writing

  transformer::QuantizeOptions options;
  options.type = to == "int4" ? MatmulType(DType::i4, group) : MatmulType(DType::i8);
  options.max_shard_bytes = static_cast<std::uint64_t>(shard_gib * (1ull << 30));
  std::size_t last_percent = 0;
  if (!quiet)
    options.progress = [&](std::size_t done, std::size_t total) {
      const std::size_t percent = total ? done * 100 / total : 100;
      if (percent / 10 != last_percent / 10 || done == total)
        std::fprintf(stderr, "masque quantize: %zu of %zu tensors written\n", done, total);
      last_percent = percent;
    };
  const transformer::QuantizeSummary summary = transformer::write_quantized_folder(
      spec, transformer::open_checkpoint(dir), dir, out, options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const auto& q = summary.quantization;
  std::string files;
  for (const std::string& f : summary.files) files += (files.empty() ? "" : ", ") + f;
  std::string kept;
  if (q.kept_layers > 0)
    kept = " (" + std::to_string(q.kept_layers) + " kept f32: " + kInt8Rule +
           (to == "int4" ? ", or inputs not in groups of " + std::to_string(group) : "") + ")";
  std::fprintf(stderr,
               "masque quantize: %s: %lld of %lld linear layers quantized%s; %s in %s -> %s "
               "(%.1f s)\n",
               to == "int4" ? ("int4 in groups of " + std::to_string(group)).c_str() : "int8",
               static_cast<long long>(q.quantized_layers),
               static_cast<long long>(q.quantized_layers + q.kept_layers), kept.c_str(),
               bytes_text(summary.bytes).c_str(), files.c_str(), out.string().c_str(), seconds);
  for (const std::string& s : summary.skipped)
    std::fprintf(stderr, "masque quantize: not copied: %s\n", s.c_str());
  return kExitOk;
}

}  // namespace masque::cli

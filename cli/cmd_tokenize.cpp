// masque tokenize: a tokenizer alone, over records read like `masque run` reads them.
#include <iostream>

#include "common.hpp"
#include "masque/error.hpp"
#include "tasks/task.hpp"

namespace fs = std::filesystem;

namespace masque::cli {

namespace {
const char* kHelp =
    R"(Usage: masque tokenize [PIPELINE] [--tokenizer NAME] [--set key=value]... [options]

Tokenizes every record with the pipeline's tokenizer (or the one named by --tokenizer) and writes
one JSON line per record: {"id", "ids": [...], "pieces": [...], "offsets": [[begin, end], ...]}
(byte spans into the record's text).

Examples:
  echo "Hello world" | masque tokenize --tokenizer bpe --set path=../shared/tokenizers/gpt2
  masque tokenize pipelines/lm-score.yaml --no-special < corpus.txt
  masque tokenize --tokenizer wordpiece --set vocab=vocab.txt --input-format jsonl --field text
)";
}  // namespace

int cmd_tokenize(int argc, char** argv) {
  po::options_description o("Tokenizer");
  o.add_options()("help,h", "this help")("tokenizer", po::value<std::string>(),
                                         "tokenizer plugin to use (instead of a pipeline)")(
      "set,s", po::value<std::vector<std::string>>()->composing(),
      "key=value: a tokenizer parameter (repeatable; tokenizer. prefix optional)")(
      "no-special", po::bool_switch(), "leave out added special tokens ([CLS]/[SEP], BOS)")(
      "allow-plugin-file", po::bool_switch(), "allow a tokenizer given as a library file");
  po::options_description visible;
  visible.add(o).add(io_options());
  po::options_description hidden;
  hidden.add_options()("pipeline", po::value<std::string>());
  po::positional_options_description pos;
  pos.add("pipeline", 1);
  po::variables_map vm = parse(argc, argv, visible, hidden, pos);
  if (vm.count("help")) {
    std::cout << kHelp << "\n" << visible << "\n";
    return kExitOk;
  }
  if (!vm.count("pipeline") && !vm.count("tokenizer"))
    throw ConfigError(
        "masque tokenize: give a PIPELINE or --tokenizer NAME (see masque tokenize --help)");
  auto registry = open_registry(vm["quiet"].as<bool>());
  LoadOptions load;
  load.require_task = false;
  load.allow_plugin_files = vm["allow-plugin-file"].as<bool>();
  if (vm.count("tokenizer"))
    load.sets.push_back("tokenizer.plugin=" + vm["tokenizer"].as<std::string>());
  if (vm.count("set"))
    for (const auto& s : vm["set"].as<std::vector<std::string>>())
      load.sets.push_back(s.find('.') < s.find('=') ? s : "tokenizer." + s);
  Pipeline source = vm.count("pipeline") ? load_pipeline_file(vm["pipeline"].as<std::string>(),
                                                              load, *registry, task_specs())
                                         : load_pipeline({"", "<command line>", fs::current_path()},
                                                         load, *registry, task_specs());
  if (!source.has("tokenizer")) throw ConfigError("the pipeline has no tokenizer section");
  // Only the tokenizer is used: the tokenize task with its defaults.
  Pipeline pipeline;
  pipeline.file = source.file;
  pipeline.task = "tokenize";
  pipeline.plugins["tokenizer"] = source.at("tokenizer");
  pipeline.run_params = source.run_params;
  for (const auto& t : task_catalog())
    if (t.spec.name == "tokenize")
      pipeline.task_params = default_params(t.spec.params.data(), t.spec.params.size());
  pipeline.task_params.set("add_special", !vm["no-special"].as<bool>());
  return run_pipeline(pipeline, *registry, vm);
}

}  // namespace masque::cli

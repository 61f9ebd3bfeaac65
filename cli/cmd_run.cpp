// masque run PIPELINE: stream a corpus through a pipeline.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "common.hpp"
#include "dist_run.hpp"
#include "masque/error.hpp"
#include "model_folder.hpp"
#include "run/stream.hpp"
#include "tasks/task.hpp"

namespace masque::cli {

namespace fs = std::filesystem;

namespace {
const char* kHelp = R"(Usage: masque run PIPELINE [options]
       masque run --task TASK --model DIR [--tokenizer DIR] [options]

Reads records (stdin by default), runs the pipeline's task on each, writes one output record
per input record, in input order (stdout by default). Records that fail get an error record
in their place ({"id", "error"}) and the run goes on.

Examples:
  echo | masque run pipelines/lm-generate.yaml --format text   # one story from BOS
  masque run pipelines/lm-score.yaml -i corpus.txt --set task.token_logprobs=true
  masque run pipelines/translate.yaml --set decoder.plugin=beam --set decoder.beam_size=4 \
      --format nbest < words.txt
  cat in.jsonl | masque run p.yaml --input-format jsonl --field text | jq .ppl

With --model instead of PIPELINE, the pipeline is built from the model folder as it is: the
model plugin that serves its config.json (`masque plugins NAME` says what it serves), the
tokenizer from the files present (tokenizer.json, tokenizer.model, vocab.json + merges.txt,
vocab.txt, source_vocab.txt + target_vocab.txt; --tokenizer DIR looks in another folder), the
task's default mask, and the decoder settings of generation_config.json. --dump-config prints
it as a pipeline file to save and edit; `masque inspect DIR` shows what a folder holds.
  echo "Once upon a time" | masque run --task lm-score --model ../shared/models/stories260k

Run settings (batching and input limits) go in the pipeline's `run:` section or --set run.KEY=V;
`masque tasks` lists them. Older pipelines that set them under `task:` keep working (they are
read as run settings; --dump-config says so on stderr).

Scale-out (docs/scale-out.md): `mpirun -n N masque run PIPELINE -i IN -o OUT` splits IN into N
shards by bytes (at record boundaries); each rank runs one, with --threads defaulting to its
cores, and rank 0 writes OUT, identical to one process's output, with the corpus summary of
all ranks. A failed run keeps its finished shards in OUT.parts/; --resume finishes it.
Without MPI, --shard K/N runs shard K of N alone (for GNU parallel; concatenate the outputs).

Resuming (one process): `masque run P -i IN -o OUT` records in OUT.parts/ what writes OUT until
it finishes; after a kill, a crash or a failed write, the same command with --resume keeps OUT's
complete records, drops a trailing partial one and runs the rest, so OUT ends byte for byte as an
uninterrupted run's (jsonl, tsv or nbest output; the summary counts the records of this run).
A different input or pipeline is refused.

Exit codes: 0 ok; 1 some records failed; 2 usage or configuration error; 3 runtime failure;
128+N interrupted by signal N (only complete records were written).
)";

// PIPELINE, or the pipeline built from --task and --model.
Pipeline load_run_pipeline(const po::variables_map& vm, Registry& registry) {
  LoadOptions load;
  // The shorthands first: a --set of the same key wins.
  if (vm["chat"].as<bool>()) load.sets.push_back("task.chat=true");
  // As YAML double-quoted scalars (a JSON string is one): any text stays the text.
  const auto quoted = [](const std::string& text) { return nlohmann::json(text).dump(); };
  if (vm.count("system"))
    load.sets.push_back("task.system=" + quoted(vm["system"].as<std::string>()));
  if (vm.count("json-schema") && vm.count("grammar"))
    throw ConfigError("masque run: give --json-schema or --grammar, not both");
  for (const auto& [option, plugin] :
       {std::pair{"json-schema", "json-schema"}, {"grammar", "gbnf"}})
    if (vm.count(option)) {
      load.sets.push_back(std::string("constraint.plugin=") + plugin);
      load.sets.push_back(
          "constraint.file=" +
          quoted(fs::absolute(vm[option].as<std::string>()).lexically_normal().string()));
    }
  if (vm.count("set"))
    for (const auto& set : vm["set"].as<std::vector<std::string>>()) load.sets.push_back(set);
  load.allow_plugin_files = vm["allow-plugin-file"].as<bool>();
  if (!vm.count("model")) {
    if (vm.count("task") || vm.count("tokenizer"))
      throw ConfigError("masque run: --task and --tokenizer go with --model DIR");
    if (!vm.count("pipeline"))
      throw ConfigError(
          "masque run: missing PIPELINE, or --task TASK --model DIR (see masque run --help)");
    return load_pipeline_file(vm["pipeline"].as<std::string>(), load, registry, task_specs());
  }
  if (vm.count("pipeline")) throw ConfigError("masque run: give PIPELINE or --model DIR, not both");
  if (!vm.count("task"))
    throw ConfigError("masque run --model: missing --task TASK (`masque tasks` lists them)");
  FolderRequest request;
  request.task = vm["task"].as<std::string>();
  request.model_dir = vm["model"].as<std::string>();
  if (vm.count("tokenizer")) request.tokenizer_dir = vm["tokenizer"].as<std::string>();
  for (const auto& set : load.sets)
    request.tokenizer_given = request.tokenizer_given || set.rfind("tokenizer.plugin=", 0) == 0;
  const std::string yaml = folder_pipeline_yaml(request, registry, task_specs());
  return load_pipeline({yaml, "--model " + request.model_dir.string(), fs::current_path()}, load,
                       registry, task_specs());
}

// --stream writes the text of one hypothesis per record as the decoder chooses its tokens.
void check_stream(const Pipeline& pipeline, const Registry& registry, const po::variables_map& vm) {
  if (pipeline.task != "lm-generate" && pipeline.task != "seq2seq")
    throw ConfigError("--stream: the task '" + pipeline.task +
                      "' generates no text; --stream is for lm-generate and seq2seq");
  if (vm["format"].as<std::string>() != "text")
    throw ConfigError("--stream needs --format text (a JSON record is written whole)");
  const PluginConfig& decoder = pipeline.at("decoder");
  const PluginDescriptor& d = *decoder.entry->descriptor;
  if (!d.decoder || !d.decoder->streams ||
      (decoder.params.has("num_hypotheses") && decoder.params.get_int("num_hypotheses") != 1)) {
    std::string streaming;
    for (const auto& p : registry.plugins())
      if (p.descriptor->kind == PluginKind::decoder && p.descriptor->decoder &&
          p.descriptor->decoder->streams)
        streaming += (streaming.empty() ? "" : ", ") + std::string(p.descriptor->name);
    throw ConfigError("--stream needs a decoder that keeps one hypothesis (" +
                      (streaming.empty() ? std::string("none installed") : streaming) +
                      ", with num_hypotheses 1); '" + d.name +
                      "' settles its tokens only at the end");
  }
  if (vm.count("shard") || dist::launched_by_mpi())
    throw ConfigError("--stream writes one output as it goes: not with --shard or mpirun");
  // Both replay the chosen tokens after the search (and replace_unknowns rewrites them).
  for (const char* option : {"return_attention", "replace_unknowns"})
    if (pipeline.task_params.has(option) && pipeline.task_params.get_bool(option))
      throw ConfigError(std::string("--stream: not with task.") + option +
                        " (the text is settled only after the search)");
}

}  // namespace

int cmd_run(int argc, char** argv) {
  po::options_description pipeline_opts("Pipeline");
  pipeline_opts.add_options()("help,h", "this help")(
      "task", po::value<std::string>(),
      "with --model: the task to run (lm-score, lm-generate, fill, seq2seq, ...; `masque tasks`)")(
      "model", po::value<std::string>(),
      "a model folder (config.json, weights, tokenizer files) to build the pipeline from, "
      "instead of PIPELINE")("tokenizer", po::value<std::string>(),
                             "with --model: the folder holding the tokenizer files (default: "
                             "the model folder)")(
      "set,s", po::value<std::vector<std::string>>()->composing(),
      "section.key=value: set any declared parameter (repeatable; e.g. decoder.beam_size=4, "
      "decoder.plugin=beam, run.max_batch_size=8)")("dump-config", po::bool_switch(),
                                                    "print the fully resolved pipeline and exit")(
      "stream", po::bool_switch(),
      "lm-generate and seq2seq with --format text: write each record's text as its tokens are "
      "chosen (greedy or sample decoding, one hypothesis), records still in input order")(
      "allow-plugin-file", po::bool_switch(),
      "allow `plugin:` values that name a library file instead of an installed plugin")(
      "chat", po::bool_switch(),
      "lm-generate: render each record with the model's chat template (a JSON record's "
      "\"messages\", or the text as a user message) before generating (task.chat=true)")(
      "system", po::value<std::string>(),
      "with --chat: a system message before each text record (task.system)")(
      "json-schema", po::value<std::string>(),
      "FILE: every generated output is JSON valid under this schema (constraint.plugin="
      "json-schema, constraint.file=FILE; docs/instruct.md)")(
      "grammar", po::value<std::string>(),
      "FILE: every generated output matches this GBNF grammar (constraint.plugin=gbnf, "
      "constraint.file=FILE)");
  po::options_description scale_opts("Scale-out");
  scale_opts.add_options()("shard", po::value<std::string>(),
                           "K/N: run only shard K (0-based) of N equal byte ranges of -i FILE; "
                           "record ids stay those of the whole file")(
      "resume", po::bool_switch(),
      "finish an interrupted or failed run of -i FILE -o OUT: a single process keeps OUT's "
      "complete records and runs the rest; a sharded run (mpirun) reruns only the shards "
      "missing from OUT.parts/");
  po::options_description visible;
  visible.add(pipeline_opts).add(io_options()).add(scale_opts);
  po::options_description hidden;
  hidden.add_options()("pipeline", po::value<std::string>());
  po::positional_options_description pos;
  pos.add("pipeline", 1);
  po::variables_map vm = parse(argc, argv, visible, hidden, pos);
  if (vm.count("help")) {
    std::cout << kHelp << "\n" << visible << "\n";
    return kExitOk;
  }
  auto registry = open_registry(vm["quiet"].as<bool>());
  Pipeline pipeline = load_run_pipeline(vm, *registry);
  if (vm["dump-config"].as<bool>()) {
    for (const auto& note : pipeline.notes)
      std::fprintf(stderr, "masque: note: %s\n", note.c_str());
    std::cout << pipeline.dump();
    return kExitOk;
  }
  static StreamSink stream;
  if (vm["stream"].as<bool>()) {
    check_stream(pipeline, *registry, vm);
    StreamSink::install(&stream);
  }
  if (vm.count("shard"))
    return run_one_shard(pipeline, *registry, vm, parse_shard_spec(vm["shard"].as<std::string>()));
  // Any launcher's count (srun sets no OMPI_ variable): each process would run it all.
  dist::check_ranks_supported("run the whole corpus", ", or use --shard K/N");
  if (dist::launched_by_mpi() && dist::mpi_compiled()) return run_sharded(pipeline, *registry, vm);
  return run_single(pipeline, *registry, vm);
}

}  // namespace masque::cli

// masque run PIPELINE: stream a corpus through a pipeline.
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "common.hpp"
#include "dist_run.hpp"
#include "masque/error.hpp"
#include "tasks/task.hpp"

namespace masque::cli {

namespace {
const char* kHelp = R"(Usage: masque run PIPELINE [options]

Reads records (stdin by default), runs the pipeline's task on each, writes one output record
per input record, in input order (stdout by default). Records that fail get an error record
in their place ({"id", "error"}) and the run goes on.

Examples:
  echo | masque run pipelines/lm-generate.yaml --format text   # one story from BOS
  masque run pipelines/lm-score.yaml -i corpus.txt --set task.token_logprobs=true
  masque run pipelines/translate.yaml --set decoder.plugin=beam --set decoder.beam_size=4 \
      --format nbest < words.txt
  cat in.jsonl | masque run p.yaml --input-format jsonl --field text | jq .ppl

Run settings (batching and input limits) go in the pipeline's `run:` section or --set run.KEY=V;
`masque tasks` lists them. Older pipelines that set them under `task:` keep working (they are
read as run settings; --dump-config says so on stderr).

Scale-out (docs/scale-out.md): `mpirun -n N masque run PIPELINE -i IN -o OUT` splits IN into N
shards by bytes (at record boundaries); each rank runs one, with --threads defaulting to its
cores, and rank 0 writes OUT, identical to one process's output, with the corpus summary of
all ranks. A failed run keeps its finished shards in OUT.parts/; --resume finishes it.
Without MPI, --shard K/N runs shard K of N alone (for GNU parallel; concatenate the outputs).

Exit codes: 0 ok; 1 some records failed; 2 usage or configuration error; 3 runtime failure;
128+N interrupted by signal N (only complete records were written).
)";
}  // namespace

int cmd_run(int argc, char** argv) {
  po::options_description pipeline_opts("Pipeline");
  pipeline_opts.add_options()("help,h", "this help")(
      "set,s", po::value<std::vector<std::string>>()->composing(),
      "section.key=value: set any declared parameter (repeatable; e.g. decoder.beam_size=4, "
      "decoder.plugin=beam, run.max_batch_size=8)")("dump-config", po::bool_switch(),
                                                    "print the fully resolved pipeline and exit")(
      "allow-plugin-file", po::bool_switch(),
      "allow `plugin:` values that name a library file instead of an installed plugin");
  po::options_description scale_opts("Scale-out");
  scale_opts.add_options()("shard", po::value<std::string>(),
                           "K/N: run only shard K (0-based) of N equal byte ranges of -i FILE; "
                           "record ids stay those of the whole file")(
      "resume", po::bool_switch(),
      "finish a sharded run (mpirun, or one that failed) from the parts in OUT.parts/, "
      "without redoing the shards that finished");
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
  if (!vm.count("pipeline"))
    throw ConfigError("masque run: missing PIPELINE (see masque run --help)");
  auto registry = open_registry(vm["quiet"].as<bool>());
  LoadOptions load;
  if (vm.count("set")) load.sets = vm["set"].as<std::vector<std::string>>();
  load.allow_plugin_files = vm["allow-plugin-file"].as<bool>();
  Pipeline pipeline =
      load_pipeline_file(vm["pipeline"].as<std::string>(), load, *registry, task_specs());
  if (vm["dump-config"].as<bool>()) {
    for (const auto& note : pipeline.notes)
      std::fprintf(stderr, "masque: note: %s\n", note.c_str());
    std::cout << pipeline.dump();
    return kExitOk;
  }
  if (vm.count("shard"))
    return run_one_shard(pipeline, *registry, vm, parse_shard_spec(vm["shard"].as<std::string>()));
  if (dist::launched_by_mpi() && !dist::mpi_compiled()) {
    const char* ranks = std::getenv("OMPI_COMM_WORLD_SIZE");
    if (ranks && std::string(ranks) != "1")
      throw ConfigError(
          "this masque was built without MPI, so each of the " + std::string(ranks) +
          " processes mpirun started would run the whole corpus; rebuild with libopenmpi-dev "
          "installed (masque --version says whether MPI is compiled in), or use --shard K/N");
  }
  if ((dist::launched_by_mpi() && dist::mpi_compiled()) || vm["resume"].as<bool>())
    return run_sharded(pipeline, *registry, vm);
  return run_pipeline(pipeline, *registry, vm);
}

}  // namespace masque::cli

// masque train: a pipeline run backwards; the mask decides what the network learns.
#include <cstdio>
#include <iostream>
#include <thread>

#include "common.hpp"
#include "masque/dist.hpp"
#include "masque/error.hpp"
#include "masque/train/trainer.hpp"
#include "train/session.hpp"
#include "train/settings.hpp"

namespace masque::cli {

namespace {
const char* kHelp = R"(Usage: masque train PIPELINE [options]

Trains the pipeline's model under its mask strategy: the `task:` section (name: train) names the
objective, the data and the optimizer (`masque tasks train` lists every key with its default);
the model, tokenizer and mask sections are the ones `masque run` reads. A model folder with
config.json and no weights is trained from scratch; with weights, it is fine-tuned.

Writes into task.output: checkpoint-NNNNNN/ (each a model folder `masque run` loads unchanged:
config.json, model.safetensors, tokenizer files; plus the trainer's state), `last` and `best`
links, metrics.jsonl (one JSON object per step and per validation) and pipeline.yaml.

Examples:
  scripts/g2p-data.sh && masque train pipelines/train-g2p-unilm.yaml --threads 2
  masque train pipelines/train-g2p-unilm.yaml --resume data/g2p/runs/unilm   # after Ctrl-C
  masque run pipelines/g2p.yaml < words.txt           # runs data/g2p/runs/unilm/best
  masque train pipelines/train-causal-lm.yaml --set task.train_file=stories.txt \
      --set task.steps=200 --set task.lr=3e-4 --threads 2
  mpirun -n 2 masque train pipelines/train-g2p-unilm.yaml   # data-parallel (docs/scale-out.md)

Under mpirun (or srun) the ranks train data-parallel: each micro-batch is cut into
ranks x --threads parts, each rank trains its own, and the gradients are summed over the ranks in
rank order, so every rank applies the same update; the losses equal one process's within float
rounding. Rank 0 writes the checkpoints, metrics and progress. To stop every rank with a
checkpoint, send mpirun SIGUSR1 (it passes it on; its SIGINT kills the ranks a second later).

Exit codes: 0 trained; 2 usage, configuration or data error (e.g. more skipped records than
task.max_bad_records); 3 runtime failure; 128+N stopped by signal N (SIGINT, SIGTERM, SIGHUP,
SIGQUIT, SIGUSR1, SIGUSR2) after a complete checkpoint of the last finished step (continue with
--resume).
)";
}  // namespace

int cmd_train(int argc, char** argv) {
  po::options_description opts("Options");
  opts.add_options()("help,h", "this help")(
      "set,s", po::value<std::vector<std::string>>()->composing(),
      "section.key=value: set any declared parameter (repeatable; e.g. task.lr=1e-4, "
      "task.steps=1000, mask.plugin=causal)")(
      "resume", po::value<std::string>(),
      "continue a run from a checkpoint folder, or from a run folder's `last` checkpoint")(
      "threads,t", po::value<int>()->default_value(1),
      "micro-batch parts trained in parallel, their gradients summed in a fixed order (a run is "
      "reproducible for a given seed and thread count); the machine's cores are split among them")(
      "dump-config", po::bool_switch(), "print the fully resolved pipeline and exit")(
      "quiet,q", po::bool_switch(), "no progress line and no per-record skip messages")(
      "allow-plugin-file", po::bool_switch(),
      "allow `plugin:` values that name a library file instead of an installed plugin");
  po::options_description hidden;
  hidden.add_options()("pipeline", po::value<std::string>());
  po::positional_options_description pos;
  pos.add("pipeline", 1);
  po::variables_map vm = parse(argc, argv, opts, hidden, pos);
  if (vm.count("help")) {
    std::cout << kHelp << "\n" << opts << "\n";
    return kExitOk;
  }
  if (!vm.count("pipeline"))
    throw ConfigError("masque train: missing PIPELINE (see masque train --help)");
  const int threads = vm["threads"].as<int>();
  if (threads < 1 || threads > 256)
    throw ConfigError("masque train: --threads must be in [1, 256], got " +
                      std::to_string(threads));
  auto registry = open_registry(vm["quiet"].as<bool>());
  LoadOptions load;
  if (vm.count("set")) load.sets = vm["set"].as<std::vector<std::string>>();
  load.allow_plugin_files = vm["allow-plugin-file"].as<bool>();
  Pipeline pipeline = load_pipeline_file(vm["pipeline"].as<std::string>(), load, *registry,
                                         {train::train_task_spec()});
  if (vm["dump-config"].as<bool>()) {
    std::cout << pipeline.dump();
    return kExitOk;
  }
  train::SessionOptions options;
  if (vm.count("resume")) options.resume = vm["resume"].as<std::string>();
  options.threads = threads;
  options.quiet = vm["quiet"].as<bool>();
  dist::check_ranks_supported("train the whole run alone, all into the same task.output");
  dist::Communicator& comm = dist::world();
  if (comm.size() == 1) return train::run_training(std::move(pipeline), *registry, options);
  // Several ranks: one that fails must not leave the others waiting in a reduction.
  options.communicator = &comm;
  try {
    return train::run_training(std::move(pipeline), *registry, options);
  } catch (const train::StepFailed& e) {
    // Every rank stopped at this step and rank 0 kept the one before: no abort. The rank that
    // failed says why, rank 0 which rank it was.
    if (e.here() || comm.rank() == 0)
      std::fprintf(stderr, "masque: %s: error: %s\n", comm.where().c_str(), e.what());
    return e.exit_code();
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "masque: %s: error: %s\n", comm.where().c_str(), e.what());
    comm.abort(kExitUsage);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "masque: %s: error: %s\n", comm.where().c_str(), e.what());
    comm.abort(kExitRuntime);
  }
  return kExitRuntime;  // not reached: abort() ends the job
}

}  // namespace masque::cli

// masque: run Transformer language models over corpora.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include <boost/program_options/errors.hpp>

#include "masque/abi.hpp"
#include "masque/dist.hpp"
#include "masque/error.hpp"

namespace masque::cli {
int cmd_run(int argc, char** argv);
int cmd_plugins(int argc, char** argv);
int cmd_tasks(int argc, char** argv);
int cmd_mask(int argc, char** argv);
int cmd_attention(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_eval(int argc, char** argv);
int cmd_train(int argc, char** argv);
int cmd_inspect(int argc, char** argv);
int cmd_quantize(int argc, char** argv);
int cmd_chat_template(int argc, char** argv);
}  // namespace masque::cli

namespace {

const char* kUsage = R"(masque — run Transformer language models over corpora

Usage: masque COMMAND [OPTIONS]

Commands:
  run PIPELINE      stream a corpus through a pipeline (score, generate, fill, seq2seq, ...)
  run --task T --model DIR   the same with the pipeline built from a model folder
  inspect DIR       a model folder: architecture, plugin, parameters, vocabulary, tasks
  quantize DIR --to int8|int4 -o OUT   a copy of a model folder with quantized weights
  train PIPELINE    train or fine-tune the pipeline's model under its mask (resumable)
  plugins [NAME]    list the plugins, or show one plugin's parameters
  tasks [NAME]      list the tasks a pipeline can run, or show one task's parameters
  mask              show a mask strategy's attention pattern for some tokens
  attention PIPELINE TEXT  draw a layer's attention under the pipeline's mask (SVG, JSON)
  tokenize          run a tokenizer alone: ids, pieces and byte offsets per record
  eval              word and token error rates of hypotheses against references
  chat-template DIR  render conversations with a model folder's chat template (to check it)

Options:
  -h, --help        this help; `masque COMMAND --help` for a command
  --version         version, plugin ABI and build fingerprint

Examples:
  echo | masque run pipelines/lm-generate.yaml --format text
  echo "Once upon a time" | masque run pipelines/lm-score.yaml
  echo "Once upon a time" | masque run --task lm-score --model ../shared/models/stories260k
  masque inspect ../shared/models/stories260k
  masque plugins beam
  masque mask --strategy permutation --order 3,1,4,2,0 北 京 欢 迎 你

Exit codes: 0 ok; 1 some records failed (each has an error record in its place);
2 usage or configuration error (nothing ran); 3 runtime failure (e.g. the output closed);
128+N interrupted by signal N (only complete records were written).
)";

// Under mpirun each rank prints its own errors: say which rank (and host) it is. With other
// ranks the error ends the whole job (MPI_Abort): they may be waiting for this one in a
// collective, and MPI_Finalize at exit would wait for them — the job would hang.
int fail(const char* message, int code) {
  std::string where;
  masque::dist::Communicator* world = nullptr;
  try {
    if (masque::dist::launched_by_mpi()) {
      world = &masque::dist::world();
      where = world->where();
    }
  } catch (...) {  // MPI could not start: the message still goes out
  }
  std::fprintf(stderr, "masque: %s%serror: %s\n", where.c_str(), where.empty() ? "" : ": ",
               message);
  if (world && world->size() > 1) {
    std::fflush(nullptr);
    world->abort(code);
  }
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace masque;
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return kExitUsage;
  }
  const std::string command = argv[1];
  try {
    if (command == "-h" || command == "--help" || command == "help") {
      std::fputs(kUsage, stdout);
      return kExitOk;
    }
    if (command == "--version" || command == "version") {
      std::printf("masque %s\nplugin ABI %u.%u\nbuild %s\nMPI: %s\n", kVersion, kAbiMajor,
                  kAbiMinor, kBuildFingerprint, dist::mpi_version().c_str());
      return kExitOk;
    }
    // Subcommands see argv[0] = "masque COMMAND".
    if (command == "run") return cli::cmd_run(argc - 1, argv + 1);
    if (command == "plugins") return cli::cmd_plugins(argc - 1, argv + 1);
    if (command == "tasks") return cli::cmd_tasks(argc - 1, argv + 1);
    if (command == "mask") return cli::cmd_mask(argc - 1, argv + 1);
    if (command == "attention") return cli::cmd_attention(argc - 1, argv + 1);
    if (command == "tokenize") return cli::cmd_tokenize(argc - 1, argv + 1);
    if (command == "eval") return cli::cmd_eval(argc - 1, argv + 1);
    if (command == "train") return cli::cmd_train(argc - 1, argv + 1);
    if (command == "inspect") return cli::cmd_inspect(argc - 1, argv + 1);
    if (command == "quantize") return cli::cmd_quantize(argc - 1, argv + 1);
    if (command == "chat-template") return cli::cmd_chat_template(argc - 1, argv + 1);
    std::fprintf(stderr, "masque: unknown command '%s'\n\n%s", command.c_str(), kUsage);
    return kExitUsage;
  } catch (const boost::program_options::error& e) {
    std::fprintf(stderr, "masque %s: %s (see masque %s --help)\n", command.c_str(), e.what(),
                 command.c_str());
    return kExitUsage;
  } catch (const ConfigError& e) {
    return fail(e.what(), kExitUsage);
  } catch (const std::exception& e) {
    return fail(e.what(), kExitRuntime);
  } catch (...) {  // a plugin may throw anything; still a message and an exit code, not an abort
    return fail("an exception that is not a std::exception", kExitRuntime);
  }
}

// Pieces shared by the masque subcommands.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "masque/dist.hpp"
#include "masque/model.hpp"
#include "pipeline.hpp"
#include "registry.hpp"
#include "run/runner.hpp"

namespace masque::cli {

namespace po = boost::program_options;

// The registry over the default plugin directories; warnings about ignored path entries and
// broken plugin files go to stderr unless quiet.
std::unique_ptr<Registry> open_registry(bool quiet);

// Parses argv after the subcommand name; throws po::error on bad usage.
po::variables_map parse(int argc, char** argv, const po::options_description& visible,
                        const po::options_description& hidden = {},
                        const po::positional_options_description& positional = {});

// Worker threads when --threads is not given: the cores this process may use (its CPU
// affinity, which mpirun and taskset narrow), shared among the ranks on this machine under MPI.
int default_threads(const dist::Communicator& comm);

// Options shared by run and tokenize: input/output, formats, threads, progress.
po::options_description io_options();
// The run settings come from the pipeline's `run:` section (run/settings.hpp).
RunOptions run_options_from(const po::variables_map& vm, const Params& run_params);

// Opens -i / -o ("-" or absent = stdin / stdout). ConfigError naming the file on failure. A
// FILE.gz or FILE.zst is read decompressed (`source` instead of `in`), an OUT.gz or OUT.zst
// written compressed (`out` compresses into `out_file`).
struct Streams {
  std::FILE* in = stdin;
  std::unique_ptr<ByteSource> source;
  std::FILE* out = stdout;
  std::FILE* out_file = nullptr;
  std::uint64_t input_size = 0;  // of a plain input file: the progress line's 100 %
  // Ends a compressed output's last member and flushes it: the reason when that fails, or "".
  std::string close_output();
  ~Streams();
};
void open_streams(const po::variables_map& vm, Streams& streams);

// Writes --summary and prints the summary on stderr (unless --quiet), with the matmul types of
// `model`'s linear layers when it was asked for bf16 or int8 (int8 keeps narrow layers f32).
void report_summary(const Task& task, const RunStats& stats, const RunOptions& options,
                    const Model* model = nullptr);
// The exit code of a finished run; a run that stopped early ends the process here (its
// workers may still be busy) after saying why.
int finish_run(const RunStats& stats);

// Runs the pipeline's task over the input; returns the exit code.
int run_pipeline(const Pipeline& pipeline, const Registry& registry, const po::variables_map& vm);

}  // namespace masque::cli

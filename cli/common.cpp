#include "common.hpp"

#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "io/input_file.hpp"
#include "masque/error.hpp"
#include "tasks/task.hpp"

namespace masque::cli {

std::unique_ptr<Registry> open_registry(bool quiet) {
  std::vector<std::string> warnings;
  auto dirs = Registry::default_dirs(&warnings);
  auto registry = std::make_unique<Registry>(dirs);
  if (!quiet) {
    for (const auto& w : warnings) std::fprintf(stderr, "masque: warning: %s\n", w.c_str());
    for (const auto& p : registry->problems())
      std::fprintf(stderr, "masque: warning: skipping %s\n", p.message.c_str());
  }
  return registry;
}

po::variables_map parse(int argc, char** argv, const po::options_description& visible,
                        const po::options_description& hidden,
                        const po::positional_options_description& positional) {
  po::options_description all;
  all.add(visible).add(hidden);
  po::variables_map vm;
  po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
  po::notify(vm);
  return vm;
}

po::options_description io_options() {
  po::options_description o("Input and output");
  o.add_options()("input,i", po::value<std::string>()->default_value("-"),
                  "input file (- = stdin; a FILE.gz or FILE.zst is read decompressed)")(
      "output,o", po::value<std::string>()->default_value("-"),
      "output file (- = stdout; an OUT.gz or OUT.zst is written compressed, in whole members)")(
      "input-format", po::value<std::string>()->default_value("text"),
      "text (one record per line), tsv (named columns), jsonl (one JSON object per line), "
      "ids (space-separated token ids per line)")(
      "field", po::value<std::string>()->default_value("text"),
      "jsonl/tsv: the field (TSV: the column, which must be there) holding the text")(
      "columns", po::value<std::string>(),
      "tsv: comma-separated column names (default: the first line is a header)")(
      "format,f", po::value<std::string>()->default_value("jsonl"),
      "output: jsonl (one JSON object per record), text (the text as it is, for reading: a "
      "generated text may span lines), tsv, nbest (id ||| text ||| score; tsv and nbest escape "
      "tabs and newlines as \\t and \\n, one line per record or hypothesis)")(
      "keep-fields", po::bool_switch(),
      "copy the input fields into each successful JSON output record; a field the record "
      "writes itself (id, the task's fields) or reserves (error) is kept as input_NAME")(
      "unbuffered", po::bool_switch(), "flush after every record")(
      "threads,t", po::value<int>(),
      "worker threads (batches run in parallel); default: the cores this process may use "
      "(its CPU affinity), under mpirun this rank's share of its machine's cores")(
      "intra-threads", po::value<int>()->default_value(1),
      "oneDNN threads inside each worker (helps one long batch; 1 is best for small models)")(
      "quiet,q", po::bool_switch(),
      "no progress line and no summary on stderr (errors, and the failed records of --format "
      "text, are still reported)")("fail-fast", po::bool_switch(),
                                   "stop at the first record that fails (exit code 1)")(
      "summary", po::value<std::string>(), "also write the corpus summary as JSON to this file");
  return o;
}

int default_threads(const dist::Communicator& comm) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) < cores)
    return std::max(1, CPU_COUNT(&set));  // bound by a launcher or taskset: its cores are ours
  return std::max(1, cores / std::max(1, comm.local_size()));
}

namespace {

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return a != "-" && b != "-" && std::filesystem::equivalent(a, b, ec);
}

// Files the run will write: never the input (opening it for writing would empty it before a
// record is read), and the summary's folder must take it (found out at the end, the run's work
// would be done but its summary lost).
void check_written_files(const po::variables_map& vm) {
  const std::string in = vm.count("input") ? vm["input"].as<std::string>() : "-";
  if (vm.count("output") && same_file(in, vm["output"].as<std::string>()))
    throw ConfigError("-o " + vm["output"].as<std::string>() + ": is the input file (-i " + in +
                      "); writing it would destroy the input");
  if (!vm.count("summary")) return;
  const std::string summary = vm["summary"].as<std::string>();
  if (same_file(in, summary))
    throw ConfigError("--summary " + summary + ": is the input file (-i " + in + ")");
  if (vm.count("output") && same_file(vm["output"].as<std::string>(), summary))
    throw ConfigError("--summary " + summary + ": is the output file");
  if (std::filesystem::is_directory(summary))
    throw ConfigError("--summary " + summary + ": is a directory, not a file to write");
  const std::filesystem::path parent = std::filesystem::path(summary).parent_path();
  const std::string dir = parent.empty() ? "." : parent.string();
  if (::access(dir.c_str(), W_OK) != 0)
    throw ConfigError("--summary " + summary + ": cannot write in " + dir + ": " +
                      std::strerror(errno));
}

}  // namespace

RunOptions run_options_from(const po::variables_map& vm, const Params& run_params) {
  check_written_files(vm);
  RunOptions o;
  o.input.format = parse_input_format(vm["input-format"].as<std::string>());
  o.input.field = vm["field"].as<std::string>();
  o.input.require_tsv_field = true;
  if (vm.count("columns")) {
    std::stringstream ss(vm["columns"].as<std::string>());
    std::string c;
    while (std::getline(ss, c, ',')) o.input.columns.push_back(c);
  }
  apply_input_limits(run_params, o.input);
  o.batching = batching_from(run_params);
  o.format = parse_output_format(vm["format"].as<std::string>());
  o.unbuffered = vm["unbuffered"].as<bool>();
  o.threads = vm.count("threads") ? vm["threads"].as<int>() : default_threads(dist::world());
  o.intra_threads = vm["intra-threads"].as<int>();
  if (o.threads < 1 || o.threads > 256) throw ConfigError("--threads: expected 1..256");
  if (o.intra_threads < 1 || o.intra_threads > 256)
    throw ConfigError("--intra-threads: expected 1..256");
  o.quiet = vm["quiet"].as<bool>();
  o.progress = !o.quiet && isatty(fileno(stderr));
  o.fail_fast = vm["fail-fast"].as<bool>();
  o.keep_fields = vm["keep-fields"].as<bool>();
  if (vm.count("summary")) o.summary_file = vm["summary"].as<std::string>();
  for (const auto& [option, name] : {std::pair{"-i", "input"}, {"-o", "output"}})
    if (vm.count(name)) o.files.emplace_back(option, vm[name].as<std::string>());
  if (!o.summary_file.empty()) o.files.emplace_back("--summary", o.summary_file);
  return o;
}

std::string Streams::close_output() {
  if (!out_file) return std::fflush(out) == 0 ? "" : std::strerror(errno);
  const int closed = std::fclose(out);
  out = out_file;
  out_file = nullptr;
  if (closed != 0) return std::strerror(errno);
  return std::fflush(out) == 0 ? "" : std::strerror(errno);
}

Streams::~Streams() {
  if (in && in != stdin) std::fclose(in);
  if (out_file) {  // the compressing stream first: it writes into out_file
    std::fclose(out);
    out = out_file;
  }
  if (out && out != stdout) std::fclose(out);
}

void open_streams(const po::variables_map& vm, Streams& s) {
  const std::string in = vm["input"].as<std::string>();
  const std::string out = vm["output"].as<std::string>();
  struct stat st {};
  if (in != "-" && compression_of(in) != Compression::none) {
    if (::stat(in.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
      throw ConfigError(in + ": is a directory, not an input file");
    s.source = InputFile(in).stream_from(0);
  } else {
    if (in != "-") {
      s.in = std::fopen(in.c_str(), "rb");
      if (!s.in) throw ConfigError(in + ": cannot open the input file: " + std::strerror(errno));
    }
    if (fstat(fileno(s.in), &st) == 0 && S_ISDIR(st.st_mode))
      throw ConfigError(in + ": is a directory, not an input file");
    if (S_ISREG(st.st_mode)) s.input_size = static_cast<std::uint64_t>(st.st_size);
  }
  if (out != "-") {
    s.out = std::fopen(out.c_str(), "wb");
    if (!s.out) throw ConfigError(out + ": cannot open the output file: " + std::strerror(errno));
    if (const Compression c = compression_of(out); c != Compression::none) {
      s.out_file = s.out;
      s.out = open_compressing_stream(s.out_file, c, out, vm["unbuffered"].as<bool>());
    }
  }
}

namespace {

// "int8: 24 of 36 linear layers; 12 kept f32 (...)" for a model loaded with a matmul_dtype
// other than f32, else "".
std::string matmuls_of(const Model* model) {
  if (!model) return "";
  const LinearList layers = model->linear_layers();
  const bool all_f32 = std::all_of(layers.begin(), layers.end(), [](const auto& layer) {
    return layer.second->requested() == DType::f32;
  });
  return all_f32 ? "" : matmul_summary(layers);
}

// Writes --summary FILE; the reason when it cannot be written (a full disk, /dev/full), else "".
std::string write_summary_file(const Task& task, const RunStats& stats, const RunOptions& options,
                               const std::string& matmuls) {
  std::ofstream f(options.summary_file);
  nlohmann::ordered_json j = summary_json(task, stats);
  if (!matmuls.empty()) j["matmuls"] = matmuls;
  f << j.dump(2) << "\n";
  f.close();  // the bytes reach the file here, and so does its error
  return f.fail() ? std::strerror(errno) : "";
}

}  // namespace

void report_summary(const Task& task, const RunStats& stats, const RunOptions& options,
                    const Model* model) {
  const std::string matmuls = matmuls_of(model);
  const std::string summary_error =
      options.summary_file.empty() ? "" : write_summary_file(task, stats, options, matmuls);
  if (!options.quiet) {
    std::fputs(summary_text(task, stats).c_str(), stderr);
    if (!matmuls.empty()) std::fprintf(stderr, "masque: matmuls %s\n", matmuls.c_str());
    std::fprintf(stderr, "masque: %d worker thread%s, %d oneDNN thread%s each\n", options.threads,
                 options.threads == 1 ? "" : "s", options.intra_threads,
                 options.intra_threads == 1 ? "" : "s");
  }
  if (summary_error.empty()) return;
  const std::string message =
      "cannot write the summary to " + options.summary_file + ": " + summary_error;
  // A finished run must not exit 0 without the summary it was asked for; one that stopped
  // early keeps its own exit code (finish_run).
  if (stats.complete()) throw RuntimeError(message);
  std::fprintf(stderr, "masque: %s\n", message.c_str());
}

namespace {

// "N complete records", and the record --stream left in part, for the messages of a stop.
std::string records_written(const RunStats& stats) {
  const std::string n = std::to_string(stats.records);
  return n + " complete records" +
         (stats.next_in_part ? " (--stream wrote part of record " + n + ")" : "");
}

}  // namespace

int finish_run(const RunStats& stats) {
  if (stats.interrupted) {
    std::fprintf(stderr, "masque: interrupted after %s\n", records_written(stats).c_str());
    std::fflush(nullptr);
    std::_Exit(128 + interrupt_signal());
  }
  if (!stats.output_error.empty()) {
    std::fprintf(stderr, "masque: cannot write the output (%s); stopped after %s\n",
                 stats.output_error.c_str(), records_written(stats).c_str());
    std::fflush(nullptr);
    std::_Exit(kExitRuntime);
  }
  if (stats.stopped_on_failure) {
    std::fprintf(stderr, "masque: stopped at the first failed record (--fail-fast)\n");
    std::fflush(nullptr);
    std::_Exit(kExitRecordsFailed);
  }
  return stats.failed ? kExitRecordsFailed : kExitOk;
}

int run_pipeline(const Pipeline& pipeline, const Registry& registry, const po::variables_map& vm) {
  RunOptions options = run_options_from(vm, pipeline.run_params);
  check_task_run(pipeline, {.files = options.files});  // before the output file is made
  Streams streams;
  open_streams(vm, streams);
  options.input_size = streams.input_size;
  Plugins plugins = create_plugins(pipeline, registry);
  std::unique_ptr<Task> task = create_task(pipeline, plugins);
  install_signal_handlers();
  RunStats stats = streams.source
                       ? run_corpus(*task, std::move(streams.source), streams.out, options)
                       : run_corpus(*task, streams.in, streams.out, options);
  if (const std::string error = streams.close_output();
      !error.empty() && stats.output_error.empty())
    stats.output_error = error;
  report_summary(*task, stats, options, plugins.model.get());
  return finish_run(stats);
}

}  // namespace masque::cli

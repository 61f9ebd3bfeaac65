#include "dist_run.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "io/compression.hpp"
#include "io/input_file.hpp"
#include "io/output.hpp"
#include "masque/error.hpp"
#include "run/parts.hpp"

namespace masque::cli {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::ordered_json;

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

// The input as a regular file (shards are byte ranges of it).
std::string input_file(const po::variables_map& vm, const char* why) {
  const std::string in = vm["input"].as<std::string>();
  struct stat st {};
  if (in != "-" && ::stat(in.c_str(), &st) != 0)  // as a plain run says it
    throw ConfigError(in + ": cannot open the input file: " + std::strerror(errno));
  if (in == "-" || !S_ISREG(st.st_mode))
    throw ConfigError(std::string(why) + " needs -i FILE, a regular file (got '" + in +
                      "'): the processes read their shares of it");
  return in;
}

// OUT must be a file this process can create, checked before any record runs: a directory was
// found only when the finished output was renamed into place (exit 3, the work lost), and a
// folder that does not exist was made (OUT.parts/ needs one).
void check_output_file(const std::string& out) {
  struct stat st {};
  if (::stat(out.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw ConfigError(out + ": cannot open the output file: " + std::strerror(EISDIR));
  const fs::path parent = fs::path(out).parent_path();
  const std::string dir = parent.empty() ? "." : parent.string();
  if (::access(dir.c_str(), W_OK) != 0)
    throw ConfigError(out + ": cannot open the output file: cannot write in " + dir + ": " +
                      std::strerror(errno));
}

// What a shard writes into: `file` itself, or a stream compressing into it when OUT's name
// asks for it (OUT.gz, OUT.zst: each part is whole gzip members / zstd frames, so the parts
// concatenated are one valid stream).
class ShardOutput {
 public:
  ShardOutput(std::FILE* file, const std::string& out, const RunOptions& options)
      : file_(file), stream_(file) {
    if (const Compression c = compression_of(out); c != Compression::none)
      stream_ = open_compressing_stream(file, c, out, options.unbuffered);
  }
  // A run that threw: the records written so far stay readable. After finish() the file may
  // be closed: nothing is touched again.
  ~ShardOutput() { finish(); }
  ShardOutput(const ShardOutput&) = delete;
  ShardOutput& operator=(const ShardOutput&) = delete;
  std::FILE* stream() const { return stream_; }
  // Ends the compression and flushes the file, once; false on a write error (errno says which).
  bool finish() {
    if (finished_) return true;
    finished_ = true;
    if (stream_ != file_) {
      const int closed = std::fclose(stream_);
      stream_ = file_;
      if (closed != 0) return false;
    }
    return std::fflush(file_) == 0;
  }

 private:
  std::FILE* file_;
  std::FILE* stream_;
  bool finished_ = false;
};

// An unnamed file in $TMPDIR: a rank's output until rank 0 takes it.
File scratch_file() {
  const char* dir = std::getenv("TMPDIR");
  std::string name = std::string(dir && *dir ? dir : "/tmp") + "/masque-shard-XXXXXX";
  const int fd = ::mkstemp(name.data());
  if (fd < 0)
    throw RuntimeError(name + ": cannot create a temporary file: " + std::strerror(errno));
  ::unlink(name.c_str());
  return File(::fdopen(fd, "w+b"));
}

// What makes two runs' parts interchangeable: the same input file and the same settings.
json run_identity(const Pipeline& pipeline, const po::variables_map& vm, const std::string& in) {
  struct stat st {};
  ::stat(in.c_str(), &st);
  json id;
  id["input"] = fs::absolute(in).string();
  id["input_bytes"] = static_cast<std::uint64_t>(st.st_size);
  id["input_mtime_ns"] =
      static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  id["pipeline"] = pipeline.dump();
  for (const char* key : {"input-format", "field", "format"}) id[key] = vm[key].as<std::string>();
  id["columns"] = vm.count("columns") ? vm["columns"].as<std::string>() : "";
  id["keep-fields"] = vm["keep-fields"].as<bool>();
  return id;
}

// The first key of `identity` whose value differs in the `old` manifest's run, or "".
std::string identity_difference(const json& old, const json& identity) {
  for (const auto& [key, value] : identity.items())
    if (!old.contains("run") || old["run"].value(key, json()) != value) return key;
  return "";
}

// ConfigError unless every rank reads the same input with the same pipeline and options:
// `identities` are the ranks' run_identity() and host, gathered on rank 0. A file's path and
// time may differ between hosts (copies), its size may not.
void check_same_run(const std::vector<std::string>& identities) {
  const json first = json::parse(identities.at(0));
  for (std::size_t r = 1; r < identities.size(); ++r) {
    const json other = json::parse(identities[r]);
    for (const auto& [key, value] : first["run"].items()) {
      if (key == "input" || key == "input_mtime_ns" || other["run"].value(key, json()) == value)
        continue;
      throw ConfigError("rank " + std::to_string(r) + " on " + other["host"].get<std::string>() +
                        " runs with another " + key + " than rank 0 on " +
                        first["host"].get<std::string>() +
                        " (every rank must read the same input file, of the same size, with the "
                        "same pipeline and options)");
    }
  }
}

// Rank 0's plan, sent to every rank: the shard count and the shards already done, or an error.
json make_plan(const PartsDir& parts, const std::string& out, const json& identity, bool resume,
               int ranks) {
  json plan{{"shards", ranks}, {"done", json::array()}, {"note", ""}};
  const json old = resume ? parts.manifest() : json();
  if (resume && old.is_null() && fs::exists(out)) {
    // A finished run removed its parts: as one process does, --resume does not run it again.
    plan["error"] = "nothing to resume: " + out + " has no unfinished run recorded in " +
                    parts.path().string() +
                    " (a finished run removes it); run without --resume to write it again";
    return plan;
  }
  if (resume && old.is_null()) {
    plan["note"] = "nothing to resume in " + parts.path().string() + "; running from the start";
  } else if (resume) {
    if (const std::string key = identity_difference(old, identity); !key.empty()) {
      plan["error"] = parts.path().string() + " holds the parts of a different run (its " + key +
                      " differs): run without --resume to start again, or remove the directory";
      return plan;
    }
    const int shards = old.value("shards", 0);
    if (shards < 1) {
      plan["error"] = parts.path().string() + "/manifest.json: no shard count";
      return plan;
    }
    plan["shards"] = shards;
    for (int k = 0; k < shards; ++k)
      if (parts.done(k)) plan["done"].push_back(k);
    plan["note"] = "resuming: " + std::to_string(shards - static_cast<int>(plan["done"].size())) +
                   " of " + std::to_string(shards) + " shards to run (the others finished before)";
    return plan;
  }
  parts.create(json{{"shards", ranks}, {"run", identity}});
  return plan;
}

// One shard's run; `out` gets its records. Leaves `task` alive when the run stopped early.
struct ShardOutcome {
  int shard = 0;
  RunStats stats;
  json figures;  // records, failed, tokens, the task's summary state
};

// Records [range.begin, range.end) of the input file through the task into `out`.
ShardOutcome run_range(int shard, const ShardRange& range, const std::string& in,
                       const ShardedInput& info, const Pipeline& pipeline, const Plugins& plugins,
                       RunOptions options, std::FILE* out) {
  std::unique_ptr<ByteSource> input = InputFile(in).stream_from(range.begin);
  options.first_record = range.first_record;
  options.input_limit = range.end - range.begin;
  options.input_size = info.size ? options.input_limit : 0;  // a compressed file's is not known
  if (options.input.columns.empty()) options.input.columns = info.columns;
  auto task = create_task(pipeline, plugins);
  ShardOutcome outcome;
  outcome.shard = shard;
  outcome.stats = run_corpus(*task, std::move(input), out, options);
  if (!outcome.stats.complete()) {
    static_cast<void>(task.release());  // workers may still use it: left to the process exit
    return outcome;
  }
  outcome.figures = {{"shard", shard},
                     {"first_record", range.first_record},
                     {"records", outcome.stats.records},
                     {"failed", outcome.stats.failed},
                     {"tokens", outcome.stats.tokens},
                     {"state", task->summary_state()}};
  return outcome;
}

ShardOutcome run_shard(int shard, int count, const std::string& in, const ShardedInput& info,
                       const Pipeline& pipeline, const Plugins& plugins, const RunOptions& options,
                       std::FILE* out) {
  InputFile file(in);
  const ShardRange range = shard_range(file, info, shard, count);
  RunOptions shard_options = options;
  shard_options.shards = count;
  return run_range(shard, range, in, info, pipeline, plugins, shard_options, out);
}

// Why a shard stopped early, and the exit code that says so.
json incomplete(int shard, const RunStats& s) {
  json j{{"shard", shard}};
  if (s.interrupted) {
    j["error"] = "interrupted by signal " + std::to_string(interrupt_signal());
    j["code"] = 128 + interrupt_signal();
  } else if (!s.output_error.empty()) {
    j["error"] = "cannot write its output (" + s.output_error + ")";
    j["code"] = kExitRuntime;
  } else {
    j["error"] = "stopped at a failed record (--fail-fast)";
    j["code"] = kExitRecordsFailed;
  }
  return j;
}

// Rank r > 0 streams a finished shard's scratch file to rank 0 in pieces; an empty piece ends.
void send_part(dist::Communicator& comm, std::FILE* file, int shard) {
  std::rewind(file);
  std::string piece(std::size_t{4} << 20, '\0');
  while (std::size_t n = std::fread(piece.data(), 1, piece.size(), file))
    comm.send(std::string_view(piece.data(), n), 0, shard);
  if (std::ferror(file))
    throw RuntimeError("cannot read back the output of shard " + std::to_string(shard));
  comm.send({}, 0, shard);
}

void receive_part(dist::Communicator& comm, const PartsDir& parts, int shard, int from) {
  File out(std::fopen(parts.temp(shard).c_str(), "wb"));
  if (!out) throw RuntimeError(parts.temp(shard).string() + ": cannot create");
  while (true) {
    const std::string piece = comm.receive(from, shard);
    if (piece.empty()) break;
    if (std::fwrite(piece.data(), 1, piece.size(), out.get()) != piece.size())
      throw RuntimeError(parts.temp(shard).string() + ": cannot write: " + std::strerror(errno));
  }
  if (std::fflush(out.get()) != 0)
    throw RuntimeError(parts.temp(shard).string() + ": cannot write: " + std::strerror(errno));
}

// Rank 0: the corpus figures of all shards, merged in shard order.
RunStats merge_figures(const PartsDir& parts, int shards, Task& total) {
  RunStats stats;
  for (int k = 0; k < shards; ++k) {
    const json f = parts.figures(k);
    stats.records += f.value("records", std::uint64_t{0});
    stats.failed += f.value("failed", std::uint64_t{0});
    stats.tokens += f.value("tokens", std::uint64_t{0});
    total.merge_summary_state(f.value("state", json::object()));
  }
  return stats;
}

struct Job {
  dist::Communicator& comm;
  const Pipeline& pipeline;
  const Registry& registry;
  const po::variables_map& vm;
};

int sharded(const Job& job) {
  dist::Communicator& comm = job.comm;
  RunOptions options = run_options_from(job.vm, job.pipeline.run_params);
  if (comm.rank() != 0) options.progress = false;
  const char* why = comm.uses_mpi() ? "masque run under mpirun" : "masque run --resume";
  const std::string in = input_file(job.vm, why);
  const std::string out = job.vm["output"].as<std::string>();
  if (out == "-")
    throw ConfigError(std::string(why) +
                      " needs -o FILE: the output is put together from per-shard parts next to it");
  InputFile file(in);
  const ShardedInput info = inspect_input(file, options.input);
  const PartsDir parts(out);

  // Rank 0 checks that every rank runs the same job, then decides which shards are to run;
  // every rank learns it.
  const json identity = run_identity(job.pipeline, job.vm, in);
  const std::vector<std::string> identities =
      comm.gather(json{{"run", identity}, {"host", comm.host()}}.dump(), 0);
  std::string plan_text;
  if (comm.rank() == 0) {
    try {
      check_same_run(identities);
      check_output_file(out);
      check_task_run(job.pipeline, {.shards = comm.size(), .files = options.files});
      plan_text = make_plan(parts, out, identity, job.vm["resume"].as<bool>(), comm.size()).dump();
    } catch (const std::exception& e) {
      plan_text = json{{"error", e.what()}}.dump();
    }
  }
  comm.broadcast(plan_text, 0);
  const json plan = json::parse(plan_text);
  if (plan.contains("error")) {
    if (comm.rank() == 0)
      std::fprintf(stderr, "masque: error: %s\n", plan["error"].get<std::string>().c_str());
    return kExitUsage;  // the same on every rank: MPI ends normally
  }
  if (comm.rank() == 0 && !plan["note"].get<std::string>().empty() && !options.quiet)
    std::fprintf(stderr, "masque: note: %s\n", plan["note"].get<std::string>().c_str());
  const int shards = plan["shards"].get<int>();
  std::vector<bool> done(static_cast<std::size_t>(shards), false);
  for (const auto& k : plan["done"]) done[k.get<std::size_t>()] = true;
  std::vector<int> todo;
  for (int k = 0; k < shards; ++k)
    if (!done[static_cast<std::size_t>(k)]) todo.push_back(k);

  Plugins plugins = create_plugins(job.pipeline, job.registry);
  install_signal_handlers();
  const auto start = Clock::now();  // as a plain run's figures: from the first record read
  // Rank r runs todo[r], todo[r + size], ...; rank 0 commits its parts at once, the others
  // keep theirs in scratch files until rank 0 takes them.
  json mine = json::array();
  std::vector<File> scratch;
  bool stopped = false;
  for (std::size_t i = static_cast<std::size_t>(comm.rank()); i < todo.size();
       i += static_cast<std::size_t>(comm.size())) {
    const int k = todo[i];
    File part = comm.rank() == 0 ? File(std::fopen(parts.temp(k).c_str(), "wb")) : scratch_file();
    if (!part) throw RuntimeError(parts.temp(k).string() + ": cannot create");
    ShardOutput output(part.get(), out, options);
    ShardOutcome o =
        run_shard(k, shards, in, info, job.pipeline, plugins, options, output.stream());
    if (!o.stats.complete()) {
      mine.push_back(incomplete(k, o.stats));
      mine.back()["host"] = comm.host();
      static_cast<void>(part.release());
      stopped = true;
      break;
    }
    if (!output.finish())
      throw RuntimeError("cannot write the output of shard " + std::to_string(k) + ": " +
                         std::strerror(errno));
    if (comm.rank() == 0) {
      part.reset();
      parts.commit(k, o.figures);
    } else {
      scratch.push_back(std::move(part));
    }
    mine.push_back({{"shard", k}, {"figures", o.figures}});
  }

  // Every rank learns every outcome; the finished parts move to rank 0 in rank order.
  const std::vector<std::string> outcomes = comm.all_gather(mine.dump());
  std::vector<std::string> failures;
  int failure_code = kExitOk;
  for (int r = 0; r < comm.size(); ++r) {
    std::size_t next_scratch = 0;
    for (const auto& o : json::parse(outcomes[static_cast<std::size_t>(r)])) {
      const int k = o["shard"].get<int>();
      if (o.contains("error")) {
        failures.push_back("shard " + std::to_string(k) + " (rank " + std::to_string(r) + " on " +
                           o["host"].get<std::string>() + "): " + o["error"].get<std::string>());
        if (failure_code == kExitOk) failure_code = o["code"].get<int>();
        continue;
      }
      if (r == 0) continue;
      if (comm.rank() == r) send_part(comm, scratch[next_scratch++].get(), k);
      if (comm.rank() == 0) {
        receive_part(comm, parts, k, r);
        parts.commit(k, o["figures"]);
      }
    }
  }

  int code = kExitOk;
  if (comm.rank() == 0) {
    if (failures.empty()) {
      auto total = create_task(job.pipeline, plugins);
      RunStats stats = merge_figures(parts, shards, *total);
      stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
      parts.assemble(shards, out);
      report_summary(*total, stats, options, plugins.model.get());
      code = stats.failed ? kExitRecordsFailed : kExitOk;
    } else {
      for (const auto& f : failures) std::fprintf(stderr, "masque: %s\n", f.c_str());
      std::fprintf(stderr,
                   "masque: %s is not written; the finished shards are kept in %s: run the same "
                   "command with --resume to finish\n",
                   out.c_str(), parts.path().c_str());
      code = failure_code;
    }
  }
  std::string code_text = std::to_string(code);
  comm.broadcast(code_text, 0);
  code = std::stoi(code_text);
  if (stopped || !failures.empty()) {
    // Workers of a stopped shard may still be busy: end here rather than unwind.
    std::fflush(nullptr);
    dist::finalize();
    std::_Exit(code);
  }
  return code;
}

[[noreturn]] void abort_job(dist::Communicator& comm, const char* message, int code) {
  std::fprintf(stderr, "masque: %s: error: %s\n", comm.where().c_str(), message);
  std::fflush(nullptr);
  comm.abort(code);
  std::_Exit(code);  // not reached: abort() does not return
}

// --- a single process writing -o FILE directly, resumable record by record -------------------

// Where the line ending just before `end` starts: after the previous '\n', or 0.
std::uint64_t line_start(int fd, std::uint64_t end) {
  char buffer[65536];
  while (end > 0) {
    const std::uint64_t begin = end > sizeof buffer ? end - sizeof buffer : 0;
    const auto n = ::pread(fd, buffer, end - begin, static_cast<off_t>(begin));
    if (n <= 0)
      throw RuntimeError(std::string("cannot read the output file: ") + std::strerror(errno));
    for (auto i = static_cast<std::uint64_t>(n); i > 0; --i)
      if (buffer[i - 1] == '\n') return begin + i;
    end = begin;
  }
  return 0;
}

std::string read_range(int fd, std::uint64_t begin, std::uint64_t end) {
  std::string text(end - begin, '\0');
  if (::pread(fd, text.data(), text.size(), static_cast<off_t>(begin)) !=
      static_cast<ssize_t>(text.size()))
    throw RuntimeError(std::string("cannot read the output file: ") + std::strerror(errno));
  return text;
}

// The record id an output line starts with (jsonl: its "id"; tsv and nbest: the first field).
std::uint64_t line_record_id(const std::string& line, OutputFormat format, const std::string& out) {
  try {
    if (format == OutputFormat::jsonl) return json::parse(line).at("id").get<std::uint64_t>();
    std::size_t used = 0;
    const std::uint64_t id = std::stoull(line, &used);
    const char* after = format == OutputFormat::tsv ? "\t" : " ||| ";
    if (line.compare(used, std::strlen(after), after) == 0) return id;
  } catch (const std::exception&) {
  }
  throw ConfigError(out + ": its last complete line is not a record of this run's --format (" +
                    line.substr(0, 80) + "); remove the file to start again");
}

// What --resume keeps of OUT: its complete records (a trailing partial line, and for nbest
// every line of the last record, are dropped) and the id of the first record still to run.
struct KeptOutput {
  std::uint64_t bytes = 0;
  std::uint64_t next_record = 0;
};

// The kept part of `size` bytes of output lines in `fd`.
KeptOutput kept_lines(int fd, std::uint64_t size, OutputFormat format, const std::string& out) {
  KeptOutput kept;
  const std::uint64_t end = line_start(fd, size);
  if (end == 0) return kept;
  std::uint64_t start = line_start(fd, end - 1);
  const std::uint64_t id = line_record_id(read_range(fd, start, end - 1), format, out);
  kept = {end, id + 1};
  if (format == OutputFormat::nbest) {  // the last record's hypotheses may be incomplete
    while (start > 0) {
      const std::uint64_t before = line_start(fd, start - 1);
      if (line_record_id(read_range(fd, before, start - 1), format, out) != id) break;
      start = before;
    }
    kept = {start, id};
  }
  return kept;
}

KeptOutput kept_output(const std::string& out, OutputFormat format) {
  const int fd = ::open(out.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return {};
    throw ConfigError(out + ": cannot open the output file: " + std::strerror(errno));
  }
  struct stat st {};
  ::fstat(fd, &st);
  try {
    const KeptOutput kept = kept_lines(fd, static_cast<std::uint64_t>(st.st_size), format, out);
    ::close(fd);
    return kept;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

// What --resume keeps of a compressed OUT: its whole members (an unfinished last one, a killed
// run's, is dropped) up to the end of the last complete record. The member holding that end is
// cut off at its start; its kept bytes (`carry`) are written again, the first of the next one.
struct KeptCompressed {
  KeptOutput kept;
  std::uint64_t file_bytes = 0;  // of OUT, to keep
  std::string carry;
};

KeptCompressed kept_compressed(const std::string& out, OutputFormat format, Compression c) {
  KeptCompressed k;
  if (!fs::exists(out)) return k;
  File plain = scratch_file();
  const WholeFrames whole = copy_whole_frames(out, c, plain.get());
  const int fd = fileno(plain.get());
  k.kept = kept_lines(fd, whole.frames.empty() ? 0 : whole.frames.back().decompressed, format, out);
  std::uint64_t from = 0;
  for (const FrameEnd& f : whole.frames) {
    if (f.decompressed > k.kept.bytes) break;
    k.file_bytes = f.compressed;
    from = f.decompressed;
  }
  k.carry = read_range(fd, from, k.kept.bytes);
  return k;
}

bool regular_or_missing(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) != 0 ? errno == ENOENT : S_ISREG(st.st_mode);
}

}  // namespace

int run_sharded(const Pipeline& pipeline, const Registry& registry, const po::variables_map& vm) {
  dist::Communicator& comm = dist::world();
  if (!comm.uses_mpi()) return sharded({comm, pipeline, registry, vm});
  // An error on one rank would leave the others waiting: it ends the whole job, naming the rank.
  try {
    return sharded({comm, pipeline, registry, vm});
  } catch (const ConfigError& e) {
    abort_job(comm, e.what(), kExitUsage);
  } catch (const std::exception& e) {
    abort_job(comm, e.what(), kExitRuntime);
  }
}

int run_one_shard(const Pipeline& pipeline, const Registry& registry, const po::variables_map& vm,
                  ShardSpec shard) {
  if (vm["resume"].as<bool>())
    throw ConfigError(
        "--shard and --resume do not go together: with --shard, skip the shards "
        "whose output exists (GNU parallel's --resume does)");
  if (dist::world().size() > 1)
    throw ConfigError("--shard under mpirun with several ranks: mpirun shards by itself");
  RunOptions options = run_options_from(vm, pipeline.run_params);
  const std::string in = input_file(vm, "masque run --shard");
  const std::string out = vm["output"].as<std::string>();
  check_task_run(pipeline, {.shards = shard.count, .files = options.files});
  InputFile input(in);
  const ShardedInput info = inspect_input(input, options.input);
  // Written under a temporary name, renamed when the shard is complete.
  const std::string temp = out == "-" ? "" : out + ".masque-tmp";
  File file;
  if (!temp.empty()) {
    check_output_file(out);
    file.reset(std::fopen(temp.c_str(), "wb"));
    if (!file) throw ConfigError(temp + ": cannot open the output file: " + std::strerror(errno));
  }
  Plugins plugins = create_plugins(pipeline, registry);
  install_signal_handlers();
  ShardOutput output(file ? file.get() : stdout, out, options);
  ShardOutcome o =
      run_shard(shard.index, shard.count, in, info, pipeline, plugins, options, output.stream());
  if (!o.stats.complete()) {
    output.finish();
    static_cast<void>(file.release());
    return finish_run(o.stats);
  }
  if (!output.finish()) throw RuntimeError(temp + ": cannot write: " + std::strerror(errno));
  file.reset();
  if (!temp.empty()) fs::rename(temp, out);
  auto total = create_task(pipeline, plugins);
  total->merge_summary_state(o.figures["state"]);
  report_summary(*total, o.stats, options, plugins.model.get());
  return finish_run(o.stats);
}

int run_single(const Pipeline& pipeline, const Registry& registry, const po::variables_map& vm) {
  const bool resume = vm["resume"].as<bool>();
  const std::string in = vm["input"].as<std::string>();
  const std::string out = vm["output"].as<std::string>();
  RunOptions options = run_options_from(vm, pipeline.run_params);
  const bool text = options.format == OutputFormat::text;
  struct stat st {};
  const bool input_is_file = in != "-" && ::stat(in.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  if (!resume && (!input_is_file || out == "-" || !regular_or_missing(out) || text))
    return run_pipeline(pipeline, registry, vm);  // nothing a later --resume could continue
  const PartsDir parts(out);
  json old;
  if (resume) {
    input_file(vm, "masque run --resume");
    if (out == "-") throw ConfigError("masque run --resume needs -o FILE: the output to continue");
    old = parts.manifest();
    if (!old.is_null() && !old.value("direct", false))
      return run_sharded(pipeline, registry, vm);  // the parts of a sharded run
    if (text)
      throw ConfigError(
          "masque run --resume: --format text cannot be resumed (a record's text may span "
          "lines); use jsonl, tsv or nbest");
    if (old.is_null() && fs::exists(out))
      throw ConfigError("nothing to resume: " + out + " has no unfinished run recorded in " +
                        parts.path().string() +
                        " (a finished run removes it); run without --resume to write it again");
  }
  const json identity = run_identity(pipeline, vm, in);
  if (!old.is_null())
    if (const std::string key = identity_difference(old, identity); !key.empty())
      throw ConfigError(out + " was written by a different run (its " + key + " differs, see " +
                        parts.path().string() +
                        "/manifest.json): run without --resume to start again");
  check_output_file(out);
  const Compression compression = compression_of(out);
  KeptCompressed kept_c;
  if (!old.is_null() && compression != Compression::none) {
    kept_c = kept_compressed(out, options.format, compression);
  } else if (!old.is_null()) {
    kept_c.kept = kept_output(out, options.format);
    kept_c.file_bytes = kept_c.kept.bytes;
  }
  const KeptOutput kept = kept_c.kept;
  InputFile input(in);
  const ShardedInput info = inspect_input(input, options.input);
  // To the end of the data (of a compressed file: without a pass to learn its size first).
  const ShardRange range{record_begin(input, info, kept.next_record),
                         input.compression() == Compression::none ? info.size : UINT64_MAX,
                         kept.next_record};
  check_task_run(pipeline, {.first_record = kept.next_record, .files = options.files});
  Plugins plugins = create_plugins(pipeline, registry);  // configuration errors before any file
  if (old.is_null()) parts.create(json{{"shards", 1}, {"direct", true}, {"run", identity}});
  if (resume && !options.quiet)
    std::fprintf(stderr, "masque: note: %s\n",
                 old.is_null() ? "nothing to resume; running from the start"
                               : ("resuming at record " + std::to_string(kept.next_record) +
                                  " (the records before it are kept in " + out + ")")
                                     .c_str());
  File file(std::fopen(out.c_str(), old.is_null() ? "wb" : "r+b"));
  if (!file || (!old.is_null() &&
                (::ftruncate(fileno(file.get()), static_cast<off_t>(kept_c.file_bytes)) != 0 ||
                 std::fseek(file.get(), 0, SEEK_END) != 0)))
    throw ConfigError(out + ": cannot open the output file: " + std::strerror(errno));
  ShardOutput output(file.get(), out, options);
  if (!kept_c.carry.empty() && std::fwrite(kept_c.carry.data(), 1, kept_c.carry.size(),
                                           output.stream()) != kept_c.carry.size())
    throw RuntimeError(out + ": cannot write: " + std::strerror(errno));
  install_signal_handlers();
  ShardOutcome o = run_range(0, range, in, info, pipeline, plugins, options, output.stream());
  if (!o.stats.complete()) {
    output.finish();  // the writer has stopped: a compressed OUT gets its last member whole
    static_cast<void>(file.release());
    std::fprintf(stderr,
                 "masque: %s holds the complete records so far: run the same command with "
                 "--resume to finish\n",
                 out.c_str());
    return finish_run(o.stats);
  }
  if (!output.finish()) throw RuntimeError(out + ": cannot write: " + std::strerror(errno));
  file.reset();
  fs::remove_all(parts.path());
  auto total = create_task(pipeline, plugins);
  total->merge_summary_state(o.figures["state"]);
  report_summary(*total, o.stats, options, plugins.model.get());
  return finish_run(o.stats);
}

}  // namespace masque::cli

#include "train/session.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <thread>
#include <variant>

#include "io/read_file.hpp"
#include "masque/error.hpp"
#include "masque/safetensors_writer.hpp"
#include "masque/threading.hpp"
#include "masque/train/checkpoint.hpp"
#include "masque/train/metrics.hpp"
#include "masque/transformer/model.hpp"
#include "run/settings.hpp"
#include "run/stop_signals.hpp"
#include "tasks/labels.hpp"
#include "tasks/task.hpp"
#include "tokenizer_files.hpp"
#include "train/settings.hpp"

namespace masque::train {

namespace fs = std::filesystem;

namespace {

// ---- signals: SIGINT / SIGTERM end the run after the current step, with a checkpoint -----------
// So do the other signals whose default would end the process (masque run's stop signals):
// mpirun passes SIGUSR1 and SIGUSR2 on to every rank, and SIGHUP ends a closed terminal's run.

std::atomic<int> g_signal{0};
extern "C" void on_stop_signal(int sig) {
  g_signal.store(sig);
}

class StopSignals {
 public:
  StopSignals() {
    g_signal.store(0);
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    for (std::size_t i = 0; i < kStopSignals.size(); ++i) sigaction(kStopSignals[i], &sa, &old_[i]);
  }
  ~StopSignals() {
    for (std::size_t i = 0; i < kStopSignals.size(); ++i)
      sigaction(kStopSignals[i], &old_[i], nullptr);
  }
  static int received() { return g_signal.load(); }

 private:
  std::array<struct sigaction, kStopSignals.size()> old_{};
};

// ---- the model folder a checkpoint is --------------------------------------------------------

bool has_weights(const fs::path& folder) {
  return fs::is_regular_file(folder / "model.safetensors") ||
         fs::is_regular_file(folder / "model.safetensors.index.json");
}

// The checkpoint's parameters, and the output head's tensors it lacks initialised as the model
// family initialises a new head (normal(0, initializer_range) weights, zero biases; seeded): a
// sequence-classification head over a pretrained body. Any other missing tensor is an error.
ParameterSet with_new_head(const transformer::TransformerSpec& spec, const SafeTensors& checkpoint,
                           std::uint64_t seed, bool quiet) {
  ParameterSet params = ParameterSet::initialised(spec, spec.initializer_range, seed);
  const transformer::HeadSpec& h = spec.head;
  const std::set<std::string> head = {h.transform.weight.name, h.transform.bias.name,
                                      h.output.weight.name, h.output.bias.name};
  for (auto& e : params.entries()) {
    if (!checkpoint.contains(e.name) && head.count(e.name)) {
      if (!quiet)
        std::fprintf(stderr, "masque train: %s is new: initialised as the model family does\n",
                     e.name.c_str());
      continue;
    }
    const Tensor stored = checkpoint.get_f32(e.name, e.value.shape());
    std::memcpy(e.value.raw(), stored.raw(), e.value.bytes());
  }
  return params;
}

// The files of the tokenizer sections (their `path`-typed parameters), each with the name it has
// in a checkpoint: its own, or `target_` + its own when the source side already uses the name.
// A folder-valued one carries the files that belong to a folder's tokenizer, as the installed
// tokenizer plugins declare them (tokenizer_files.hpp).
std::vector<std::pair<fs::path, std::string>> tokenizer_files(const Pipeline& pipeline,
                                                              const Registry& registry) {
  const std::vector<std::string> carried = tok::carried_tokenizer_files(registry);
  std::vector<std::pair<fs::path, std::string>> files;
  std::set<std::string> names;
  for (const char* section : {"tokenizer", "target_tokenizer"}) {
    if (!pipeline.has(section)) continue;
    const PluginConfig& config = pipeline.at(section);
    const PluginDescriptor& d = *config.entry->descriptor;
    auto add = [&](const fs::path& file) {
      std::string name = file.filename().string();
      if (names.count(name)) name = "target_" + name;
      if (names.insert(name).second) files.emplace_back(file, name);
    };
    for (std::size_t i = 0; i < d.num_params; ++i) {
      const ParamSpec& spec = d.params[i];
      if (spec.type != ParamType::path || !config.params.has(spec.name)) continue;
      const fs::path value = config.params.get_string(spec.name);
      if (value.empty()) continue;
      if (fs::is_regular_file(value)) {
        add(value);
      } else if (fs::is_directory(value)) {
        for (const std::string& name : carried)
          if (fs::is_regular_file(value / name)) add(value / name);
      }
    }
  }
  return files;
}

// ---- what decides a run's trajectory ------------------------------------------------------

nlohmann::json json_of(const ParamValue& value) {
  return std::visit([](const auto& v) { return nlohmann::json(v); }, value);
}

// Task keys that change what the steps compute (the data order's keys are the trainer's, the
// length of the run is total_steps).
const char* const kTrajectoryKeys[] = {
    "objective",        "lr",
    "schedule",         "warmup_steps",
    "warmup_ratio",     "weight_decay",
    "adam_beta1",       "adam_beta2",
    "adam_epsilon",     "max_grad_norm",
    "label_smoothing",  "mlm_probability",
    "plm_predict",      "plm_fraction",
    "plm_target_slack", "diffusion_eps",
    "max_length",       "dropout",
    "matmul_dtype",     "input_format",
    "columns",          "field",
    "source_field",     "target_field",
    "order_field",      "label_field",
};

// FNV-1a over a file's bytes: the same records under another name are the same data.
std::string digest_of(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::uint64_t h = 0xcbf29ce484222325ull;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
    for (std::streamsize i = 0; i < in.gcount(); ++i) {
      h ^= static_cast<unsigned char>(buffer[i]);
      h *= 0x100000001b3ull;
    }
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

// What a resumed run must share with its checkpoint's to continue exactly, by the key a user
// sets: the task keys above, the plugins of the mask and model and the tokenizers' settings,
// and the training data's content.
nlohmann::json trajectory_of(const Pipeline& pipeline) {
  nlohmann::json t = nlohmann::json::object();
  for (const char* key : kTrajectoryKeys)
    if (pipeline.task_params.has(key))
      t[std::string("task.") + key] = json_of(pipeline.task_params.values().at(key));
  for (const char* key : {"invalid_utf8", "max_record_bytes"})  // which records are used
    if (pipeline.run_params.has(key))
      t[std::string("run.") + key] = json_of(pipeline.run_params.values().at(key));
  const fs::path data = pipeline.task_params.get_string("train_file");
  t["task.train_file"] = "content " + digest_of(data);
  for (const auto& [section, config] : pipeline.plugins) {
    if (section == "model") {  // its path is the checkpoint when resuming
      t["model.plugin"] = config.entry->descriptor->name;
      continue;
    }
    t[section + ".plugin"] = config.entry->descriptor->name;
    const PluginDescriptor& d = *config.entry->descriptor;
    for (std::size_t i = 0; i < d.num_params; ++i)  // paths: the checkpoint carries the files
      if (d.params[i].type != ParamType::path && config.params.has(d.params[i].name))
        t[section + "." + d.params[i].name] = json_of(config.params.values().at(d.params[i].name));
  }
  return t;
}

// "KEY OLD, this one NEW" for each key of the checkpoint's trajectory that changed.
std::vector<std::string> changed_keys(const nlohmann::json& before, const nlohmann::json& now) {
  std::vector<std::string> changed;
  for (const auto& [key, old] : before.items()) {
    const nlohmann::json value = now.contains(key) ? now[key] : nlohmann::json();
    if (value != old) changed.push_back(key + " " + old.dump() + ", this one " + value.dump());
  }
  return changed;
}

// ---- the run settings training reads ----------------------------------------------------------

// The record limits of the `run:` section (invalid_utf8, max_record_bytes) read the training
// files as they read masque run's input; its batching keys belong to masque run, and a value
// other than their default is refused rather than ignored.
void apply_run_settings(const Params& run, InputOptions& input) {
  for (const ParamSpec& spec : run_param_specs()) {
    const std::string name = spec.name;
    if (name == "invalid_utf8" || name == "max_record_bytes" || !run.has(name)) continue;
    const ParamValue& value = run.values().at(name);
    const std::string text =
        std::holds_alternative<std::int64_t>(value)  ? std::to_string(std::get<std::int64_t>(value))
        : std::holds_alternative<std::string>(value) ? std::get<std::string>(value)
                                                     : spec.default_value;
    if (text != spec.default_value)
      throw ConfigError("run." + name +
                        ": masque train does not use it (its batches are task.batch_size and "
                        "task.max_tokens)");
  }
  apply_input_limits(run, input);
}

// tokenizer_config.json for a checkpoint whose tokenizer declares settings it reads back from
// there (TokenizerTraits::saved_settings, e.g. a lowercase parameter as do_lower_case) and that
// the training set explicitly (true or false, not auto): the folder's own config (if carried)
// with those settings, so the checkpoint tokenizes as the training did. Empty when nothing needs
// saying.
std::string saved_tokenizer_config(const PluginConfig& tokenizer, const std::string& carried) {
  const TokenizerTraits* traits = tokenizer.entry->descriptor->tokenizer;
  if (!traits || !*traits->saved_settings) return "";
  nlohmann::json config = nlohmann::json::object();
  if (!carried.empty()) {
    config = nlohmann::json::parse(carried, nullptr, false);
    if (!config.is_object()) return "";  // not ours to repair: the plugin reports it
  }
  bool changed = false;
  std::istringstream pairs(traits->saved_settings);
  for (std::string pair; pairs >> pair;) {
    const auto eq = pair.find('=');
    if (eq == std::string::npos) continue;
    const std::string value = tokenizer.params.get_string(pair.substr(0, eq));
    if (value == "auto") continue;  // the carried config (or its absence) decides, as before
    config[pair.substr(eq + 1)] = value == "true";
    changed = true;
  }
  if (!changed) return "";
  if (!config.contains("tokenizer_class") && *traits->config_class)
    config["tokenizer_class"] = traits->config_class;
  return config.dump(2) + "\n";
}

// A checkpoint of another model plugin than the pipeline's would fail on a config key that
// plugin expects: say what the two are instead.
void check_model_plugin(const fs::path& checkpoint, const std::string& plugin) {
  std::ifstream in(checkpoint / "trainer_state.json");
  const nlohmann::json state = nlohmann::json::parse(in, nullptr, false);
  if (!state.is_object() || !state.contains("trajectory") || !state["trajectory"].is_object())
    return;  // an older checkpoint, or a broken state restore() reports
  const nlohmann::json& trained = state["trajectory"].value("model.plugin", nlohmann::json());
  if (trained.is_string() && trained != plugin)
    throw ConfigError(checkpoint.string() + ": a checkpoint of model plugin '" +
                      trained.get<std::string>() + "', but the pipeline's model.plugin is '" +
                      plugin + "' (resume with the pipeline the run was started with)");
}

// ---- ranks that must train the same job ---------------------------------------------------

// FNV-1a over 64-bit words, folded: whether two ranks hold the same values (not a secure hash).
class Digest {
 public:
  void mix(std::uint64_t v) {
    h_ = (h_ ^ v) * 0x100000001b3ull;
    h_ ^= h_ >> 29;
  }
  void add(const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    mix(n);
    for (std::uint64_t word = 0; n >= 8; p += 8, n -= 8) {
      std::memcpy(&word, p, 8);
      mix(word);
    }
    for (; n > 0; ++p, --n) mix(*p);
  }
  template <class T>
  void add(const std::vector<T>& v) {
    add(v.data(), v.size() * sizeof(T));
  }
  std::string hex() const {
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h_));
    return text;
  }

 private:
  std::uint64_t h_ = 0xcbf29ce484222325ull;
};

// The records as the steps see them (what a rank skipped, or tokenized otherwise, shows here).
std::string records_digest(const std::vector<Example>& examples) {
  Digest d;
  for (const Example& e : examples) {
    d.mix(e.line);
    d.add(e.ids);
    d.add(e.segments);
    d.add(e.target);
    d.add(e.order);
    d.add(e.context);
    d.mix(static_cast<std::uint64_t>(static_cast<std::int64_t>(e.label)));
  }
  return std::to_string(examples.size()) + " records, digest " + d.hex();
}

std::string weights_digest(const ParameterSet& params) {
  Digest d;
  for (const auto& e : params.entries()) {
    d.add(e.name.data(), e.name.size());
    d.add(e.value.raw(), e.value.bytes());
  }
  return "digest " + d.hex();
}

// The first difference between rank 0's job and another's (`jobs`: each rank's
// {"host", "job"}, gathered on rank 0), or "".
std::string job_difference(const std::vector<std::string>& jobs) {
  const nlohmann::ordered_json first = nlohmann::ordered_json::parse(jobs.at(0));
  for (std::size_t r = 1; r < jobs.size(); ++r) {
    const nlohmann::ordered_json other = nlohmann::ordered_json::parse(jobs[r]);
    std::vector<std::string> keys;
    for (const auto& [key, value] : first["job"].items()) keys.push_back(key);
    for (const auto& [key, value] : other["job"].items())
      if (!first["job"].contains(key)) keys.push_back(key);
    for (const std::string& key : keys) {
      const auto value_of = [&](const nlohmann::ordered_json& j) {
        return j["job"].contains(key) ? j["job"][key] : nlohmann::ordered_json();
      };
      if (value_of(first) == value_of(other)) continue;
      return "rank " + std::to_string(r) + " on " + other["host"].get<std::string>() +
             " trains with another " + key + " than rank 0 on " + first["host"].get<std::string>() +
             " (" + value_of(other).dump() + " against " + value_of(first).dump() +
             "): every rank must train the same model on the same data, with the same pipeline, "
             "--threads and --resume checkpoint";
    }
  }
  return "";
}

// ---- what the run prints ------------------------------------------------------------------

std::string number(double v, int digits = 4) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, v);
  return text;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// ---- the run ------------------------------------------------------------------------------

class Session {
 public:
  Session(Pipeline pipeline, const Registry& registry, const SessionOptions& options)
      : pipeline_(std::move(pipeline)),
        registry_(registry),
        options_(options),
        settings_(train_settings(pipeline_.task_params)) {}

  int run();

 private:
  bool leader() const { return !options_.communicator || options_.communicator->rank() == 0; }
  // Whether any rank was signalled or ran out of time (every rank stops at the same step, with
  // the signal of the first rank signalled: `signalled_rank`).
  bool should_stop(bool out_of_time, int& signal, int& signalled_rank) const;
  void load_model();
  nlohmann::json model_config() const;  // the model folder's config.json
  DropoutRates dropout_rates() const;   // config.json's, or task.dropout's
  std::vector<Example> load(const fs::path& file, const char* what) const;
  std::int64_t total_steps(const std::vector<Example>& examples) const;
  void restore();
  // The tokenizer's settings a checkpoint folder must carry to tokenize as the training did.
  void carry_tokenizer_settings();
  // ConfigError naming each key whose change would make the resumed run differ.
  void check_trajectory(const nlohmann::json& state, const fs::path& file) const;
  // Under mpirun: rank 0's error text when the ranks would not train the same steps (settings,
  // data, weights, resumed state, --threads), the same on every rank; "" when they would.
  std::string check_same_job(const std::vector<Example>& train) const;
  // Resumed before the run folder's last checkpoint: the later ones and a `best` among them
  // belong to a continuation this run replaces.
  void forget_abandoned();
  void validate(std::int64_t step);
  void save(std::int64_t step);
  void log_step(const StepResult& r, double seconds);
  [[noreturn]] void diverge(const std::string& what);
  // After an error: a checkpoint of the last whole step, unless the run diverged (a NaN model
  // is not worth keeping), so no error loses the steps made.
  void keep_progress() noexcept;
  int train_steps();  // the steps, the final validation and checkpoint
  nlohmann::json state() const;

  Pipeline pipeline_;
  const Registry& registry_;
  SessionOptions options_;
  TrainSettings settings_;
  fs::path model_dir_;
  bool from_scratch_ = false;

  Plugins plugins_;
  std::unique_ptr<MaskStrategy> source_mask_;
  ModelInfo info_;
  std::string architecture_;
  ParameterSet params_;
  std::unique_ptr<TrainableNetwork> network_;
  std::unique_ptr<Objective> objective_;
  std::unique_ptr<Trainer> trainer_;
  std::unique_ptr<CheckpointStore> store_;
  MetricsLog metrics_;
  std::vector<Example> valid_;
  nlohmann::json trajectory_;  // trajectory_of(the pipeline), kept in every checkpoint
  // Files every checkpoint carries (config.json, generation_config.json, the tokenizers'),
  // read once: the folder they came from may be a checkpoint the run prunes.
  std::vector<std::pair<std::string, std::string>> carried_;  // name, bytes

  std::int64_t total_ = 0, saved_step_ = -1, validated_step_ = -1, best_step_ = -1;
  double best_loss_ = std::numeric_limits<double>::infinity();
  double seconds_before_ = 0;  // training seconds of the run before a resume
  std::int64_t tokens_seen_ = 0;
  std::int64_t empty_steps_ = 0;  // steps with no token to predict (no update)
  bool diverged_ = false;
  std::chrono::steady_clock::time_point start_;
};

void Session::load_model() {
  PluginConfig& model = pipeline_.plugins.at("model");
  const PluginDescriptor& d = *model.entry->descriptor;
  if (!d.model || !d.model->trainable) {
    std::string trainable;
    for (const auto& p : registry_.plugins())
      if (p.descriptor->model && p.descriptor->model->trainable)
        trainable += (trainable.empty() ? "" : ", ") + std::string(p.descriptor->name);
    throw ConfigError("model plugin '" + std::string(d.name) +
                      "' is not trainable by masque train (trainable: " +
                      (trainable.empty() ? "none installed" : trainable) + ")");
  }
  const std::string pipeline_path = model.params.get_string("path");
  if (!options_.resume.empty()) {
    // A checkpoint is a model folder: the spec and the weights come from it.
    model_dir_ = CheckpointStore::resolve_resume(options_.resume);
    check_model_plugin(model_dir_, d.name);
    model.params.set("path", model_dir_.string());
  } else {
    model_dir_ = model.params.get_string("path");
    const bool weights = has_weights(model_dir_);
    if (settings_.init == InitMode::pretrained && !weights)
      throw ConfigError(model_dir_.string() +
                        ": init: pretrained, but the folder has no model.safetensors (or index)");
    from_scratch_ =
        settings_.init == InitMode::scratch || (settings_.init == InitMode::automatic && !weights);
  }
  // classify fine-tunes folders whose label head may be new (an LM's weights under a
  // *ForSequenceClassification config): the plugin gives the spec only, the weights are read
  // below.
  const bool new_head = !from_scratch_ && options_.resume.empty() &&
                        settings_.objective.kind == ObjectiveKind::classify;
  model.params.set("init_seed", from_scratch_ || new_head
                                    ? static_cast<std::int64_t>(settings_.objective.seed)
                                    : -1);
  plugins_ = create_plugins(pipeline_, registry_);
  model.params.set("path", pipeline_path);  // what the run's pipeline.yaml records
  info_ = plugins_.model->info();
  const NetworkOptions network_options{.matmul_dtype = settings_.matmul_dtype,
                                       .dropout = dropout_rates()};
  if (const auto* tm = dynamic_cast<const transformer::TransformerModel*>(plugins_.model.get())) {
    const transformer::TransformerSpec spec = tm->spec();
    architecture_ = spec.architecture;
    if (from_scratch_)
      params_ = ParameterSet::initialised(spec, spec.initializer_range, settings_.objective.seed);
    else if (new_head)
      params_ = with_new_head(spec, transformer::open_checkpoint(model_dir_),
                              settings_.objective.seed, options_.quiet || !leader());
    else
      params_ = ParameterSet::from_checkpoint(spec, transformer::open_checkpoint(model_dir_));
    network_ = std::make_unique<TrainableTransformer>(spec, params_, network_options);
  } else if (const auto* other = dynamic_cast<const TrainableModel*>(plugins_.model.get())) {
    // The plugin built its model from init_seed (or the checkpoint): train those parameters.
    architecture_ = other->trainable_architecture();
    params_ = other->parameters();
    network_ = other->network(params_, network_options);
  } else {
    throw ConfigError("model plugin '" + std::string(d.name) + "' is not a model masque can train");
  }
  plugins_.model.reset();  // the trainer keeps its own parameters
  if (info_.kind == ModelKind::encoder_decoder) {
    const PluginEntry& entry = registry_.find(PluginKind::mask, "bidirectional");
    std::unique_ptr<Plugin> p = registry_.create(entry, default_params(*entry.descriptor));
    source_mask_.reset(static_cast<MaskStrategy*>(p.release()));
  }
  if (settings_.objective.kind == ObjectiveKind::classify)
    settings_.objective.labels = config_labels(model_config());
  objective_ = std::make_unique<Objective>(
      settings_.objective, *plugins_.tokenizer, plugins_.target_tokenizer.get(),
      ObjectiveMasks{.inputs = plugins_.mask.get(), .source = source_mask_.get()}, info_);
}

nlohmann::json Session::model_config() const {
  const fs::path file = model_dir_ / "config.json";
  std::ifstream in(file);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(file.string() + ": " + e.what());
  }
}

DropoutRates Session::dropout_rates() const {
  const fs::path file = model_dir_ / "config.json";
  const nlohmann::json config = model_config();
  try {
    const ModelTraits& traits = *pipeline_.plugins.at("model").entry->descriptor->model;
    return dropout_rates_of(traits, config, settings_.dropout);
  } catch (const ConfigError& e) {
    throw ConfigError(file.string() + ": " + e.what());
  }
}

bool Session::should_stop(bool out_of_time, int& signal, int& signalled_rank) const {
  signal = StopSignals::received();
  signalled_rank = 0;
  dist::Communicator* comm = options_.communicator;
  if (!comm || comm->size() == 1) return signal != 0 || out_of_time;
  // Each rank's signal in its own slot: every rank stops with the same one (that of the first
  // rank signalled), so the message and the exit code are the same on all.
  const auto ranks = static_cast<std::size_t>(comm->size());
  std::vector<std::uint64_t> flags(ranks + 1, 0);
  flags[static_cast<std::size_t>(comm->rank())] = static_cast<std::uint64_t>(signal);
  flags[ranks] = out_of_time ? 1 : 0;
  comm->all_reduce_sum(std::span<std::uint64_t>(flags));
  signal = 0;
  for (std::size_t r = 0; r < ranks && signal == 0; ++r)
    if (flags[r] != 0) {
      signal = static_cast<int>(flags[r]);
      signalled_rank = static_cast<int>(r);
    }
  return signal != 0 || flags[ranks] != 0;
}

std::vector<Example> Session::load(const fs::path& file, const char* what) const {
  SkipLog skips(file.string(), settings_.max_bad_records,
                options_.quiet || !leader()
                    ? std::function<void(const std::string&)>([](const std::string&) {})
                    : std::function<void(const std::string&)>{});
  std::vector<Example> examples = load_examples(
      file.string(), settings_.input, [&](const Record& r) { return objective_->prepare(r); },
      skips);
  const std::int64_t total = static_cast<std::int64_t>(examples.size()) + skips.count();
  if (!leader()) return examples;
  std::fprintf(stderr, "masque train: %s: %lld usable records of %lld in %s\n", what,
               static_cast<long long>(examples.size()), static_cast<long long>(total),
               file.c_str());
  if (skips.count() > 0) std::fprintf(stderr, "masque train: %s\n", skips.summary(total).c_str());
  return examples;
}

std::int64_t Session::total_steps(const std::vector<Example>& examples) const {
  if (settings_.steps > 0) return settings_.steps;
  const TrainerOptions& t = settings_.trainer;
  const auto acc = static_cast<std::int64_t>(t.accumulation);
  auto steps_of_epoch = [&](std::int64_t epoch) {
    const auto order = epoch_order(examples.size(), t.seed, epoch, t.shuffle);
    const auto batches =
        static_cast<std::int64_t>(cut_batches(order, examples, t.batch_size, t.max_tokens).size());
    return (batches + acc - 1) / acc;
  };
  // A token budget cuts each shuffled epoch into its own number of batches.
  std::int64_t steps = 0;
  if (t.shuffle && t.max_tokens > 0)
    for (std::int64_t e = 0; e < settings_.epochs; ++e) steps += steps_of_epoch(e);
  else
    steps = steps_of_epoch(0) * settings_.epochs;
  return std::max<std::int64_t>(1, steps);
}

nlohmann::json Session::state() const {
  nlohmann::json s = trainer_->state();
  s["total_steps"] = total_;
  s["best_valid_loss"] = std::isfinite(best_loss_) ? nlohmann::json(best_loss_) : nlohmann::json();
  s["best_step"] = best_step_;
  s["seconds"] = seconds_before_ + seconds_since(start_);
  s["tokens_seen"] = tokens_seen_;
  s["empty_steps"] = empty_steps_;
  s["objective"] = to_string(settings_.objective.kind);
  s["trajectory"] = trajectory_;
  return s;
}

void Session::restore() {
  const fs::path checkpoint = CheckpointStore::resolve_resume(options_.resume);
  const fs::path state_file = checkpoint / "trainer_state.json";
  std::ifstream in(state_file);
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(state_file.string() + ": not a trainer state: " + e.what());
  }
  const std::string file = state_file.string();
  if (!state.is_object()) throw ConfigError(file + ": not a trainer state (not a JSON object)");
  // An optional integer in [low, high]: a hand-edited or damaged state is named, not obeyed.
  auto optional_int = [&](const char* key, std::int64_t fallback, std::int64_t low,
                          std::int64_t high) {
    if (!state.contains(key)) return fallback;
    const nlohmann::json& v = state[key];
    if (!v.is_number_integer() || v.get<std::int64_t>() < low || v.get<std::int64_t>() > high)
      throw ConfigError(file + ": " + key + ": " + v.dump() + " is not an integer in [" +
                        std::to_string(low) + ", " + std::to_string(high) + "]");
    return v.get<std::int64_t>();
  };
  const std::int64_t total = optional_int("total_steps", total_, 1, INT64_MAX);
  if (total != total_)
    throw ConfigError(file + ": the checkpoint's run has " + std::to_string(total) +
                      " steps, this one " + std::to_string(total_) +
                      " (steps, epochs or batching changed?)");
  const std::string objective = to_string(settings_.objective.kind);
  if (state.contains("objective") && state["objective"] != objective)
    throw ConfigError(file + ": the checkpoint's run has task.objective " +
                      state["objective"].dump() + ", this one " + objective);
  check_trajectory(state, state_file);
  trainer_->restore(state, checkpoint / "optimizer.bin");
  const std::int64_t step = trainer_->steps_done();
  const nlohmann::json loss = state.value("best_valid_loss", nlohmann::json());
  if (!loss.is_null() && !loss.is_number())
    throw ConfigError(file + ": best_valid_loss: expected a number or null, got " + loss.dump());
  if (loss.is_number()) best_loss_ = loss.get<double>();
  best_step_ = optional_int("best_step", -1, -1, step);
  const nlohmann::json seconds = state.value("seconds", nlohmann::json(0.0));
  if (!seconds.is_number() || seconds.get<double>() < 0)
    throw ConfigError(file + ": seconds: expected a number >= 0, got " + seconds.dump());
  seconds_before_ = seconds.get<double>();
  tokens_seen_ = optional_int("tokens_seen", 0, 0, INT64_MAX);
  empty_steps_ = optional_int("empty_steps", 0, 0, step);
  saved_step_ = validated_step_ = trainer_->steps_done();
  if (leader())
    std::fprintf(stderr, "masque train: resuming from %s at step %lld\n", checkpoint.c_str(),
                 static_cast<long long>(trainer_->steps_done()));
}

std::string Session::check_same_job(const std::vector<Example>& train) const {
  dist::Communicator* comm = options_.communicator;
  if (!comm || comm->size() == 1) return "";
  // Ranks that differ would reduce gradients of other data or shapes, or leave the step loop
  // at different steps (and the others waiting): compare before the first step.
  nlohmann::ordered_json job;
  for (const auto& [key, value] : trajectory_.items()) job[key] = value;
  job["--threads"] = options_.threads;
  job["number of steps"] = total_;
  job["usable training records"] = records_digest(train);
  job["model weights"] = weights_digest(params_);
  job["trainer state (--resume)"] = trainer_->state();
  const std::vector<std::string> jobs =
      comm->gather(nlohmann::ordered_json{{"host", comm->host()}, {"job", job}}.dump(), 0);
  std::string error = comm->rank() == 0 ? job_difference(jobs) : "";
  comm->broadcast(error, 0);
  return error;
}

void Session::forget_abandoned() {
  if (!leader()) return;
  const fs::path checkpoint = fs::canonical(CheckpointStore::resolve_resume(options_.resume));
  std::error_code ec;
  if (!fs::equivalent(checkpoint.parent_path(), settings_.output, ec)) return;  // another run's
  const std::int64_t step = trainer_->steps_done();
  for (const std::int64_t s : store_->resume_at(step, best_step_))
    std::fprintf(stderr, "masque train: removed %s: it continued step %lld before this resume\n",
                 store_->path_of(s).c_str(), static_cast<long long>(step));
}

void Session::check_trajectory(const nlohmann::json& state, const fs::path& file) const {
  if (!state.contains("trajectory") || !state["trajectory"].is_object()) return;  // older runs
  const std::vector<std::string> changed = changed_keys(state["trajectory"], trajectory_);
  if (changed.empty()) return;
  std::string text;
  for (const std::string& c : changed) text += (text.empty() ? "" : "; ") + c;
  throw ConfigError(file.string() + ": the checkpoint's run has " + text +
                    " (a resumed run continues exactly: set it back, or start a new run from "
                    "the checkpoint with model.path=" +
                    file.parent_path().string() + ")");
}

void Session::carry_tokenizer_settings() {
  const char* const name = "tokenizer_config.json";
  auto carried = std::find_if(carried_.begin(), carried_.end(),
                              [&](const auto& file) { return file.first == name; });
  const std::string config = saved_tokenizer_config(
      pipeline_.at("tokenizer"), carried == carried_.end() ? "" : carried->second);
  if (config.empty()) return;
  if (carried == carried_.end())
    carried_.emplace_back(name, config);
  else
    carried->second = config;
}

void Session::save(std::int64_t step) {
  if (saved_step_ == step || !leader()) return;
  const nlohmann::json s = state();
  store_->save(step, [&](const fs::path& dir) {
    for (const auto& [name, bytes] : carried_) write_file_atomically(dir / name, bytes);
    params_.save(dir / "model.safetensors");
    trainer_->save_optimizer(dir / "optimizer.bin");
    write_file_atomically(dir / "trainer_state.json", s.dump(2) + "\n");
  });
  saved_step_ = step;
}

void Session::validate(std::int64_t step) {
  if (valid_.empty() || validated_step_ == step) return;
  validated_step_ = step;
  const EvalResult e =
      trainer_->evaluate(valid_, static_cast<std::size_t>(settings_.valid_batch_size));
  if (!std::isfinite(e.loss))  // before it could be saved as a best
    diverge("the validation loss at step " + std::to_string(step) + " is " + number(e.loss));
  const double ppl = std::exp(e.loss);
  const bool best = e.loss < best_loss_;
  if (best) {
    best_loss_ = e.loss;
    best_step_ = step;
  }
  if (!leader()) return;
  metrics_.write({{"step", step}, {"valid_loss", e.loss}, {"valid_ppl", ppl}});
  std::fprintf(stderr, "%smasque train: step %lld: valid loss %s (ppl %s) over %lld tokens%s\n",
               isatty(2) && !options_.quiet ? "\r\033[K" : "", static_cast<long long>(step),
               number(e.loss).c_str(), number(ppl, 3).c_str(), static_cast<long long>(e.tokens),
               best ? ", best so far" : "");
  if (best) {
    save(step);
    store_->mark_best(step);
  }
}

void Session::diverge(const std::string& what) {
  diverged_ = true;
  throw RuntimeError("training diverged: " + what + " (lower the lr, or clip gradients)");
}

void Session::keep_progress() noexcept {
  const std::int64_t step = trainer_ ? trainer_->steps_done() : 0;
  if (diverged_ || !leader() || !store_ || step == 0 || saved_step_ == step) return;
  try {
    save(step);
    std::fprintf(stderr,
                 "masque train: the run failed after step %lld; its checkpoint %s is whole "
                 "(continue with --resume %s once the cause is fixed)\n",
                 static_cast<long long>(step), store_->path_of(step).c_str(),
                 settings_.output.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "masque train: could not keep step %lld: %s\n",
                 static_cast<long long>(step), e.what());
  }
}

void Session::log_step(const StepResult& r, double seconds) {
  if (!leader()) return;
  metrics_.write({{"step", r.step},
                  {"loss", r.loss},
                  {"lr", r.lr},
                  {"grad_norm", r.grad_norm},
                  {"tokens", r.tokens},
                  {"seconds", seconds}});
}

int Session::run() {
  if (leader()) {  // before the model and data load: a bad task.output fails at once
    std::error_code error;
    fs::create_directories(settings_.output, error);
    if (error || !fs::is_directory(settings_.output))
      throw ConfigError("task.output: cannot make the run folder " + settings_.output.string() +
                        (error ? ": " + error.message() : ": a file is in the way"));
  }
  apply_run_settings(pipeline_.run_params, settings_.input);
  trajectory_ = trajectory_of(pipeline_);
  load_model();
  const std::vector<Example> train = load(settings_.train_file, "train");
  if (!settings_.valid_file.empty()) valid_ = load(settings_.valid_file, "valid");
  total_ = total_steps(train);
  TrainerOptions t = settings_.trainer;
  t.schedule.total_steps = total_;
  if (t.schedule.warmup_steps == 0 && settings_.warmup_ratio > 0)
    t.schedule.warmup_steps =
        static_cast<std::int64_t>(std::ceil(settings_.warmup_ratio * static_cast<double>(total_)));
  const int cores =
      options_.cores > 0 ? options_.cores : static_cast<int>(std::thread::hardware_concurrency());
  const int local_ranks = options_.communicator ? options_.communicator->local_size() : 1;
  t.threads = options_.threads;
  t.intra_threads = std::max(1, cores / std::max(1, options_.threads * local_ranks));
  t.communicator = options_.communicator;
  set_thread_count(std::max(1, cores / local_ranks));
  trainer_ = std::make_unique<Trainer>(*network_, params_, *objective_, train, t);
  for (const char* name : {"config.json", "generation_config.json"})
    if (fs::is_regular_file(model_dir_ / name))
      carried_.emplace_back(name, io::read_file(model_dir_ / name));
  for (const auto& [file, name] : tokenizer_files(pipeline_, registry_))
    carried_.emplace_back(name, io::read_file(file));
  carry_tokenizer_settings();
  // Rank 0 alone owns the run folder (an error there ends every rank: cmd_train aborts the job).
  if (leader()) store_ = std::make_unique<CheckpointStore>(settings_.output, settings_.keep_last);
  start_ = std::chrono::steady_clock::now();
  if (!options_.resume.empty()) restore();
  if (const std::string error = check_same_job(train); !error.empty()) {
    if (leader()) std::fprintf(stderr, "masque: error: %s\n", error.c_str());
    return kExitUsage;  // on every rank, before any step: the job ends normally
  }
  if (!options_.resume.empty()) {
    forget_abandoned();
  } else if (leader() && !store_->steps().empty()) {
    throw ConfigError(settings_.output.string() + " already holds a run (" +
                      store_->path_of(store_->steps().back()).filename().string() +
                      "): continue it with --resume " + settings_.output.string() +
                      ", or set another task.output");
  }
  if (leader()) {
    metrics_ = MetricsLog(settings_.output / "metrics.jsonl", trainer_->steps_done());
    write_file_atomically(settings_.output / "pipeline.yaml", pipeline_.dump());
  }
  if (leader())
    std::fprintf(stderr,
                 "masque train: %s %s, %lld parameters, %s; %lld steps (%lld records, batch %zu x "
                 "%d), lr %g; writing %s\n",
                 architecture_.c_str(), from_scratch_ ? "from scratch" : "fine-tuned",
                 static_cast<long long>(params_.count()), to_string(settings_.objective.kind),
                 static_cast<long long>(total_), static_cast<long long>(train.size()), t.batch_size,
                 t.accumulation, t.schedule.base_lr, settings_.output.c_str());

  if (leader() && network_->options().dropout.any()) {
    const DropoutRates& d = network_->options().dropout;
    std::fprintf(stderr,
                 "masque train: dropout: embeddings %g, sub-layer outputs %g, attention "
                 "probabilities %g, activations %g (seed %llu)\n",
                 d.embedding, d.residual, d.attention, d.activation,
                 static_cast<unsigned long long>(settings_.trainer.seed));
  }
  try {
    return train_steps();
  } catch (const StepFailed&) {
    // Every rank is here at the same step: the others wait until rank 0 has kept it, then the
    // job ends in order (cmd_train).
    keep_progress();
    options_.communicator->barrier();
    throw;
  } catch (...) {
    keep_progress();
    throw;
  }
}

int Session::train_steps() {
  const StopSignals signals;
  const bool tty = isatty(2) && !options_.quiet && leader();
  Progress progress(total_, trainer_->steps_done(), tty);
  std::int64_t window_tokens = 0;
  auto window_start = std::chrono::steady_clock::now();
  double tokens_per_s = 0;
  bool out_of_time = false;
  int stop_signal = 0, signalled_rank = 0;
  const std::int64_t first_step = trainer_->steps_done();
  while (trainer_->steps_done() < total_) {
    // The budget is checked after each step: a run makes at least one.
    const bool late = settings_.max_minutes > 0 && trainer_->steps_done() > first_step &&
                      seconds_since(start_) > settings_.max_minutes * 60;
    if (should_stop(late, stop_signal, signalled_rank)) {
      out_of_time = stop_signal == 0;
      break;
    }
    const StepResult r = trainer_->step();
    tokens_seen_ += r.input_tokens;
    window_tokens += r.input_tokens;
    // The rate over the window so far (at least the last step), renewed every second.
    const double window = seconds_since(window_start);
    tokens_per_s = static_cast<double>(window_tokens) / std::max(window, 1e-9);
    if (window >= 1.0) {
      window_tokens = 0;
      window_start = std::chrono::steady_clock::now();
    }
    log_step(r, seconds_before_ + seconds_since(start_));
    if (r.tokens == 0 && ++empty_steps_ == 1 && leader() && !options_.quiet) {
      progress.finish();
      std::fprintf(stderr,
                   "masque train: step %lld has no token to predict (mlm or diffusion chose "
                   "none in its records): no update; the summary counts such steps\n",
                   static_cast<long long>(r.step));
    }
    if (!std::isfinite(r.loss))
      diverge("the loss of step " + std::to_string(r.step) + " is " + number(r.loss));
    progress.update(r.epoch, r.step, r.loss, r.lr, tokens_per_s);
    if (!tty && leader() && settings_.log_every > 0 && r.step % settings_.log_every == 0 &&
        !options_.quiet)
      std::fprintf(stderr, "masque train: epoch %lld step %lld/%lld loss %s lr %.3g %.0f tok/s\n",
                   static_cast<long long>(r.epoch), static_cast<long long>(r.step),
                   static_cast<long long>(total_), number(r.loss).c_str(), r.lr, tokens_per_s);
    if (settings_.valid_every > 0 && r.step % settings_.valid_every == 0) {
      progress.finish();
      validate(r.step);
    }
    if (settings_.save_every > 0 && r.step % settings_.save_every == 0) save(r.step);
  }
  progress.finish();
  const std::int64_t step = trainer_->steps_done();
  if (const int sig = stop_signal) {
    save(step);
    const std::string whom = options_.communicator && options_.communicator->size() > 1
                                 ? " (sent to rank " + std::to_string(signalled_rank) + ")"
                                 : "";
    if (leader())
      std::fprintf(stderr,
                   "masque train: stopped by signal %d%s after step %lld; checkpoint %s (continue "
                   "with --resume %s)\n",
                   sig, whom.c_str(), static_cast<long long>(step), store_->path_of(step).c_str(),
                   settings_.output.c_str());
    return 128 + sig;
  }
  validate(step);
  save(step);
  const double seconds = seconds_before_ + seconds_since(start_);
  if (leader() && empty_steps_ > 0)
    std::fprintf(stderr, "masque train: %lld of %lld steps had no token to predict (no update)\n",
                 static_cast<long long>(empty_steps_), static_cast<long long>(step));
  if (leader())
    std::fprintf(stderr, "masque train: %s %lld steps in %s (%.0f tok/s); last: %s%s\n",
                 out_of_time ? "time budget reached after" : "done:", static_cast<long long>(step),
                 Progress::format_duration(seconds).c_str(),
                 static_cast<double>(tokens_seen_) / std::max(seconds, 1e-9),
                 store_->path_of(step).c_str(),
                 best_step_ >= 0 ? ("; best: " + store_->path_of(best_step_).string() +
                                    " (valid loss " + number(best_loss_) + ")")
                                       .c_str()
                                 : "");
  return 0;
}

}  // namespace

int run_training(Pipeline pipeline, const Registry& registry, const SessionOptions& options) {
  Session session(std::move(pipeline), registry, options);
  return session.run();
}

}  // namespace masque::train

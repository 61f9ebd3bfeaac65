// Quantized model folders (quantized_folder.hpp): the format, and the writer.
#include "masque/transformer/quantized_folder.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <system_error>

#include <nlohmann/json.hpp>

#include "io/read_file.hpp"
#include "masque/error.hpp"
#include "masque/safetensors_writer.hpp"

namespace masque::transformer {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string quantized_values_name(std::string_view weight) {
  return std::string(weight) + "_quantized";
}
std::string quantized_scales_name(std::string_view weight) {
  return std::string(weight) + "_scale";
}

namespace {

[[noreturn]] void fail_key(const fs::path& file, const std::string& key, const std::string& why) {
  throw ConfigError(file.string() + ": quantization" + (key.empty() ? "" : "." + key) + ": " + why);
}

}  // namespace

std::optional<FolderQuantization> read_quantization(const json& config, const fs::path& file) {
  const auto it = config.find("quantization");
  if (it == config.end() || it->is_null()) return std::nullopt;
  auto fail = [&](const std::string& key, const std::string& why) { fail_key(file, key, why); };
  if (!it->is_object()) fail("", "expected an object (written by masque quantize)");
  auto text = [&](const char* key) {
    const auto v = it->find(key);
    if (v == it->end() || !v->is_string()) fail_key(file, key, "expected a string");
    return v->get<std::string>();
  };
  auto integer = [&](const char* key, std::int64_t fallback, std::int64_t lo, std::int64_t hi) {
    const auto v = it->find(key);
    if (v == it->end()) return fallback;
    if (!v->is_number_integer() || v->get<std::int64_t>() < lo || v->get<std::int64_t>() > hi)
      fail_key(file, key,
               "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return v->get<std::int64_t>();
  };
  if (text("format") != "masque")
    fail("format", "'" + text("format") + "' is not a format masque reads (masque)");
  if (integer("version", 0, 0, 1 << 30) != 1)
    fail("version", "masque reads version 1 (this folder may come from a newer masque)");
  FolderQuantization q;
  const std::string dtype = text("dtype");
  if (dtype == "int8") {
    q.type = DType::i8;
  } else if (dtype == "int4") {
    const auto group = integer("group_size", 32, 32, 4096);
    if (group % 32 != 0) fail("group_size", "must be a multiple of 32");
    q.type = MatmulType(DType::i4, static_cast<std::int32_t>(group));
  } else {
    fail("dtype", "'" + dtype + "' is neither int8 nor int4");
  }
  q.int8_levels = static_cast<std::int32_t>(integer("int8_levels", 127, 1, 127));
  q.quantized_layers = integer("quantized_layers", 0, 0, std::int64_t{1} << 40);
  q.kept_layers = integer("kept_layers", 0, 0, std::int64_t{1} << 40);
  return q;
}

json quantization_json(const FolderQuantization& q) {
  json j = {{"format", "masque"},
            {"version", 1},
            {"dtype", q.type.compute == DType::i4 ? "int4" : "int8"}};
  if (q.type.compute == DType::i4) j["group_size"] = q.type.group_size;
  if (q.type.compute == DType::i8) j["int8_levels"] = q.int8_levels;
  j["quantized_layers"] = q.quantized_layers;
  j["kept_layers"] = q.kept_layers;
  return j;
}

namespace {

// Weight formats other than safetensors: not copied (the quantized folder has its own weights).
bool other_weight_file(const fs::path& p) {
  static const std::set<std::string> kinds = {".bin",     ".pt",   ".pth",  ".ckpt",   ".h5",
                                              ".msgpack", ".onnx", ".gguf", ".tflite", ".ot"};
  return kinds.count(p.extension().string()) > 0;
}

// The tensors of the new checkpoint: each source tensor, or the quantized pair in its place.
struct Planned {
  std::string name;          // in the new checkpoint
  std::string source;        // the source tensor it comes from
  const LinearSpec* linear;  // quantized from this weight (values and scales), or null: copied
  bool scales = false;       // the scales of the pair (else the values)
  std::uint64_t bytes = 0;
  std::size_t element = 1;  // bytes per element: the order inside a shard (alignment)
};

std::uint64_t quantized_bytes(const LinearSpec& l, MatmulType type, bool scales) {
  const std::uint64_t in = static_cast<std::uint64_t>(l.in_features());
  const std::uint64_t out = static_cast<std::uint64_t>(l.out_features());
  if (type.compute == DType::i4)
    return scales ? out * (in / static_cast<std::uint64_t>(type.group_size)) * 2 : out * in / 2;
  return scales ? out * 4 : out * in;
}

std::string shard_name(std::size_t i, std::size_t n) {
  if (n == 1) return "model.safetensors";
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return name;
}

void copy_other_files(const fs::path& source, const fs::path& out, QuantizeSummary& summary) {
  for (const fs::directory_entry& e : fs::directory_iterator(source)) {
    const fs::path name = e.path().filename();
    if (name == "config.json" || name == "model.safetensors.index.json" ||
        name.extension() == ".safetensors")
      continue;
    if (other_weight_file(name)) {
      summary.skipped.push_back(name.string());
      continue;
    }
    fs::copy(e.path(), out / name, fs::copy_options::recursive);
  }
}

}  // namespace

QuantizeSummary write_quantized_folder(const TransformerSpec& spec, const SafeTensors& checkpoint,
                                       const fs::path& source, const fs::path& out,
                                       const QuantizeOptions& options) {
  const MatmulType type = options.type;
  if (type.compute != DType::i8 && type.compute != DType::i4)
    throw ConfigError("quantize: the type must be int8 or int4");
  const fs::path config_file = source / "config.json";
  json config = json::parse(io::read_file(config_file, "model config"), nullptr, false);
  if (config.is_discarded() || !config.is_object())
    throw ConfigError(config_file.string() + ": not a JSON object");
  if (read_quantization(config, config_file))
    throw ConfigError(config_file.string() +
                      ": the folder is already quantized (its `quantization` entry); quantize "
                      "the original folder");
  std::error_code ec;
  if (fs::exists(out, ec)) throw ConfigError(out.string() + ": exists; give a new folder");

  // Which weights are quantized: the rule on each matmul's fused shape, as Linear applies it.
  QuantizeSummary summary;
  summary.quantization.type = type;
  summary.quantization.int8_levels = int8_weight_levels();
  std::map<std::string, const LinearSpec*> quantized;
  const auto groups = matmuls(spec);
  for (const auto& group : groups) {
    std::int64_t outputs = 0;
    for (const LinearSpec& l : group) outputs += l.out_features();
    const bool yes = quantizes(group.front().in_features(), outputs, type);
    (yes ? summary.quantization.quantized_layers : summary.quantization.kept_layers) += 1;
    if (yes)
      for (const LinearSpec& l : group) quantized.emplace(l.weight.name, &l);
  }
  // A table that is also read as something else (a tied head's embeddings) stays as well.
  std::set<std::string> also_read;
  for (const Parameter& p : parameters(spec))
    if (p.role != ParameterRole::matrix) also_read.insert(p.name);

  std::vector<Planned> plan;
  for (const std::string& name : checkpoint.names()) {
    const SafeTensorEntry& e = checkpoint.entry(name);
    const auto q = quantized.find(name);
    if (!e.dtype) {  // F64, I64, ...: masque cannot hold it, and no model of masque reads it
      summary.skipped.push_back("tensor " + name + " (" + e.dtype_name + ")");
      continue;
    }
    if (q == quantized.end() || also_read.count(name))
      plan.push_back({name, name, nullptr, false, e.size, dtype_size(*e.dtype)});
    if (q != quantized.end()) {
      plan.push_back({quantized_values_name(name), name, q->second, false,
                      quantized_bytes(*q->second, type, false), 1});
      plan.push_back({quantized_scales_name(name), name, q->second, true,
                      quantized_bytes(*q->second, type, true),
                      type.compute == DType::i4 ? 2u : 4u});
    }
  }
  // Shards in checkpoint order, each at most max_shard_bytes (or one tensor).
  std::vector<std::vector<const Planned*>> shards(1);
  std::uint64_t in_shard = 0;
  for (const Planned& p : plan) {
    if (in_shard > 0 && in_shard + p.bytes > options.max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(&p);
    in_shard += p.bytes;
  }

  const fs::path partial = out.string() + ".partial";
  fs::remove_all(partial, ec);
  fs::create_directories(partial);
  try {
    const std::string entry = quantization_json(summary.quantization).dump();
    const std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                         {"masque.quantization", entry}};
    json weight_map = json::object();
    std::size_t done = 0;
    for (std::size_t s = 0; s < shards.size(); ++s) {
      std::vector<const Planned*> order = shards[s];
      // Wider elements first, so that every tensor of the shard starts aligned to its element.
      std::stable_sort(order.begin(), order.end(),
                       [](const Planned* a, const Planned* b) { return a->element > b->element; });
      std::vector<NamedTensor> tensors;
      std::map<std::string, QuantizedWeight> made;
      for (const Planned* p : order) {
        Tensor t;
        if (!p->linear) {
          t = checkpoint.get(p->source);
        } else {
          auto it = made.find(p->source);
          if (it == made.end()) {
            const SafeTensorEntry& e = checkpoint.entry(p->source);
            try {
              it = made.emplace(p->source, quantize_weight(checkpoint.get_float(p->source, e.shape),
                                                           p->linear->layout, type))
                       .first;
            } catch (const RuntimeError& err) {
              throw ConfigError(e.file.string() + ": tensor '" + p->source + "': " + err.what());
            }
          }
          t = p->scales ? it->second.scales : it->second.values;
        }
        tensors.push_back({p->name, std::move(t)});
        weight_map[p->name] = shard_name(s, shards.size());
      }
      write_safetensors(partial / shard_name(s, shards.size()), tensors, metadata);
      for (const NamedTensor& t : tensors) summary.bytes += t.tensor.bytes();
      summary.files.push_back(shard_name(s, shards.size()));
      tensors.clear();
      made.clear();
      for (const Planned* p : order) {
        checkpoint.release(p->source);  // the source pages written: not kept resident
        if (options.progress) options.progress(++done, plan.size());
      }
    }
    if (shards.size() > 1) {
      const json index = {{"metadata", {{"total_size", summary.bytes}}},
                          {"weight_map", weight_map}};
      write_file_atomically(partial / "model.safetensors.index.json", index.dump(2) + "\n");
    }
    config["quantization"] = quantization_json(summary.quantization);
    write_file_atomically(partial / "config.json", config.dump(2) + "\n");
    copy_other_files(source, partial, summary);
    fs::rename(partial, out);
  } catch (...) {
    fs::remove_all(partial, ec);
    throw;
  }
  return summary;
}

}  // namespace masque::transformer

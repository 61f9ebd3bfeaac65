// masque mask: shows which positions may attend to which under a mask strategy.
#include <unicode/uchar.h>
#include <unicode/utf8.h>

#include <algorithm>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "common.hpp"
#include "heatmap_svg.hpp"

namespace fs = std::filesystem;
#include "masque/error.hpp"
#include "masque/mask.hpp"
#include "tasks/task.hpp"

namespace masque::cli {

namespace {

const char* kHelp = R"(Usage: masque mask --strategy NAME [options] TOKEN...

Prints the attention pattern of a mask strategy over the given tokens: rows are queries,
columns are keys, ■ where attention is allowed. Positions count from 0.

Examples:
  masque mask --strategy causal 北 京 欢 迎 你
  masque mask --strategy permutation --order 3,1,4,2,0 北 京 欢 迎 你
  masque mask --strategy seq2seq --segments 0,0,0,0,0,0,1,1,1,1 \
      [CLS] 你 想 吃 啥 [SEP] 白 切 鸡 [SEP]
  masque mask --strategy permutation --set stream=query --format json a b c
  masque mask --strategy causal --format svg -o causal.svg 北 京 欢 迎 你
)";

// Terminal columns taken by a UTF-8 string (wide CJK = 2, combining marks = 0).
int display_width(const std::string& s) {
  int width = 0;
  int32_t i = 0;
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const auto n = static_cast<int32_t>(s.size());
  while (i < n) {
    UChar32 c;
    U8_NEXT(p, i, n, c);
    if (c < 0) {
      ++width;
      continue;
    }
    if (u_getCombiningClass(c) != 0 || u_charType(c) == U_NON_SPACING_MARK) continue;
    int ea = u_getIntPropertyValue(c, UCHAR_EAST_ASIAN_WIDTH);
    width += (ea == U_EA_WIDE || ea == U_EA_FULLWIDTH) ? 2 : 1;
  }
  return width;
}

std::string pad(const std::string& s, int width) {
  return s + std::string(std::max(0, width - display_width(s)), ' ');
}

std::vector<std::int32_t> parse_ints(const std::string& text, const char* option) {
  std::vector<std::int32_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      std::size_t used = 0;
      int v = std::stoi(item, &used);
      if (used != item.size()) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      throw ConfigError(std::string(option) + ": expected comma-separated integers, got '" + text +
                        "'");
    }
  }
  return out;
}

}  // namespace

int cmd_mask(int argc, char** argv) {
  po::options_description o("Options");
  o.add_options()("help,h", "this help")("strategy", po::value<std::string>(),
                                         "the mask plugin (causal, seq2seq, permutation, ...)")(
      "set,s", po::value<std::vector<std::string>>()->composing(),
      "key=value: a parameter of the strategy (repeatable)")(
      "order", po::value<std::string>(), "shortcut for --set order=... (permutation)")(
      "seed", po::value<std::string>(), "shortcut for --set seed=... (random orders)")(
      "segments", po::value<std::string>(), "segment id per token, e.g. 0,0,0,1,1 (seq2seq)")(
      "record-id", po::value<std::int64_t>()->default_value(0),
      "record number (seeds random orders)")(
      "format,f", po::value<std::string>()->default_value("grid"),
      "grid, json or svg (a picture with the tokens as labels; `masque attention` draws what "
      "the network attends to within the same pattern)")("output,o", po::value<std::string>(),
                                                         "write to this file instead of stdout")(
      "allow-plugin-file", po::bool_switch(), "allow --strategy to name a library file");
  po::options_description hidden;
  hidden.add_options()("tokens", po::value<std::vector<std::string>>());
  po::positional_options_description pos;
  pos.add("tokens", -1);
  po::variables_map vm = parse(argc, argv, o, hidden, pos);
  if (vm.count("help")) {
    std::cout << kHelp << "\n" << o << "\n";
    return kExitOk;
  }
  if (!vm.count("strategy"))
    throw ConfigError("masque mask: --strategy is required (see masque mask --help)");
  const std::string format = vm["format"].as<std::string>();
  if (format != "grid" && format != "json" && format != "svg")
    throw ConfigError("--format: expected grid, json or svg, got '" + format + "'");
  std::ofstream file;
  if (vm.count("output")) {
    file.open(vm["output"].as<std::string>(), std::ios::binary);
    if (!file)
      throw ConfigError("-o " + vm["output"].as<std::string>() + ": cannot open it for writing");
  }
  std::ostream& out = vm.count("output") ? static_cast<std::ostream&>(file) : std::cout;
  std::vector<std::string> tokens;
  if (vm.count("tokens")) tokens = vm["tokens"].as<std::vector<std::string>>();
  if (tokens.empty())
    throw ConfigError(
        "masque mask: give the tokens to lay out (e.g. masque mask --strategy "
        "causal a b c; see masque mask --help)");

  LoadOptions load;
  load.require_task = false;
  load.allow_plugin_files = vm["allow-plugin-file"].as<bool>();
  load.sets.push_back("mask.plugin=" + vm["strategy"].as<std::string>());
  if (vm.count("set"))
    for (const auto& s : vm["set"].as<std::vector<std::string>>())
      load.sets.push_back(s.rfind("mask.", 0) == 0 ? s : "mask." + s);
  if (vm.count("order")) load.sets.push_back("mask.order=" + vm["order"].as<std::string>());
  if (vm.count("seed")) load.sets.push_back("mask.seed=" + vm["seed"].as<std::string>());
  auto registry = open_registry(false);
  Pipeline pipeline =
      load_pipeline({"", "<command line>", fs::current_path()}, load, *registry, task_specs());
  Plugins plugins = create_plugins(pipeline, *registry);

  std::vector<std::int32_t> segments;
  if (vm.count("segments")) segments = parse_ints(vm["segments"].as<std::string>(), "--segments");
  MaskRequest request;
  request.length = static_cast<std::int32_t>(tokens.size());
  request.segments = segments;
  const std::int64_t record_id = vm["record-id"].as<std::int64_t>();
  if (record_id < 0)
    throw ConfigError("--record-id: expected a record number (0 or more), got " +
                      std::to_string(record_id));
  request.record_id = static_cast<std::uint64_t>(record_id);
  SequenceMask mask;
  try {
    mask = plugins.mask->build(request);
  } catch (const RecordError& e) {
    throw ConfigError(std::string("mask ") + vm["strategy"].as<std::string>() + ": " + e.what());
  }
  const std::size_t n = mask.size();
  std::vector<std::string> labels = tokens;
  for (std::size_t q = 0; q < mask.query_positions.size(); ++q) {
    auto p = static_cast<std::size_t>(mask.query_positions[q]);
    labels.push_back("?" + (p < tokens.size() ? tokens[p] : std::to_string(p)));
  }
  labels.resize(n, "");

  if (format == "svg") {
    Heatmap map;
    map.title = "mask " + vm["strategy"].as<std::string>() + ": rows = queries, columns = keys";
    map.labels = labels;
    map.allowed = allowed_cells(mask);
    map.panels.push_back({.title = "allowed", .head = -1, .values = {}});
    out << render_svg(map);
    return kExitOk;
  }
  if (format == "json") {
    // Streamed row by row: the matrix is n^2 cells, too large for a JSON tree on long inputs.
    auto field = [&out](const char* key, const nlohmann::json& value) {
      out << ",\"" << key << "\":" << value.dump();
    };
    out << "{\"strategy\":" << nlohmann::json(vm["strategy"].as<std::string>()).dump();
    field("tokens", labels);
    out << ",\"allowed\":[";
    std::string row;
    for (std::size_t i = 0; i < n; ++i) {
      row.assign(i ? ",[" : "[");
      for (std::size_t k = 0; k < n; ++k)
        row += k ? (mask.allowed(i, k) ? ",1" : ",0") : (mask.allowed(i, k) ? "1" : "0");
      out << row << "]";
    }
    out << "]";
    field("rank", mask.rank);
    if (!mask.order.empty()) field("order", mask.order);
    if (!mask.query_positions.empty()) field("query_positions", mask.query_positions);
    field("incremental", plugins.mask->supports_incremental());
    out << "}\n";
    return kExitOk;
  }

  int label_w = 1, cell_w = 2;
  for (const auto& l : labels) {
    label_w = std::max(label_w, display_width(l));
    cell_w = std::max(cell_w, display_width(l) + 1);
  }
  cell_w = std::min(cell_w, 8);
  const int index_w = static_cast<int>(std::to_string(n).size());
  out << "mask " << vm["strategy"].as<std::string>();
  if (!mask.order.empty()) {
    out << ", order";
    for (auto p : mask.order) out << " " << p;
    out << " (";
    for (std::size_t t = 0; t < mask.order.size(); ++t)
      out << (t ? " → " : "")
          << (static_cast<std::size_t>(mask.order[t]) < tokens.size() ? tokens[mask.order[t]]
                                                                      : "?");
    out << ")";
  }
  out << "; rows = queries, columns = keys, ■ = may attend\n";
  auto cut = [&](const std::string& l) {
    if (display_width(l) < cell_w) return l;
    // Truncate to the cell, keeping whole UTF-8 characters.
    std::string out;
    int32_t i = 0, n8 = static_cast<int32_t>(l.size());
    const auto* p = reinterpret_cast<const uint8_t*>(l.data());
    while (i < n8) {
      int32_t start = i;
      UChar32 c;
      U8_NEXT(p, i, n8, c);
      std::string ch = l.substr(start, i - start);
      if (display_width(out + ch) >= cell_w - 1) break;
      out += ch;
    }
    return out + "…";
  };
  auto print_line = [&out](std::string line) {
    line.erase(line.find_last_not_of(' ') + 1);
    out << line << "\n";
  };
  const std::string head(index_w + 1 + label_w + 2, ' ');
  std::string numbers = head, names = head;
  for (std::size_t k = 0; k < n; ++k) {
    numbers += pad(std::to_string(k), cell_w);
    names += pad(cut(labels[k]), cell_w);
  }
  print_line(numbers);
  print_line(names);
  for (std::size_t i = 0; i < n; ++i) {
    std::string idx = std::to_string(i);
    std::string line =
        std::string(index_w - idx.size(), ' ') + idx + " " + pad(labels[i], label_w) + "  ";
    for (std::size_t k = 0; k < n; ++k) line += pad(mask.allowed(i, k) ? "■" : "·", cell_w);
    print_line(line);
  }
  return kExitOk;
}

}  // namespace masque::cli

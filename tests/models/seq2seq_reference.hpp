// Comparing encoder-decoder model plugins (t5, marian, bart, mbart, m2m_100) with the float64
// references that t5_reference.py, marian_reference.py and bart_reference.py write
// (reference.json: per variant, pairs of a source and a teacher-forced decoder input with the
// logits of every decoder position, and the greedy and beam outputs of each source), through the
// Model contract (start encodes, step decodes on the KV cache) and through the CLI's seq2seq task.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "lm_reference.hpp"
#include "masque/error.hpp"
#include "masque/safetensors.hpp"
#include "masque/transformer/model.hpp"
#include "model_plugin.hpp"
#include "test_support.hpp"

namespace masque::test::seq2seq {

constexpr double kTol = 1e-4;

struct Pair {
  std::vector<TokenId> source, decoder_input;
  nlohmann::json logits;  // [len(decoder_input)][vocab]
};

inline std::vector<Pair> pairs(const nlohmann::json& variant) {
  std::vector<Pair> out;
  for (const auto& p : variant["pairs"])
    out.push_back({p["source"].get<std::vector<TokenId>>(),
                   p["decoder_input"].get<std::vector<TokenId>>(), p["logits"]});
  return out;
}

inline double max_error(std::span<const float> row, const nlohmann::json& want) {
  REQUIRE(row.size() == want.size());
  double worst = 0;
  for (std::size_t v = 0; v < row.size(); ++v)
    worst = std::max(worst, std::abs(row[v] - want[v].get<double>()));
  return worst;
}

// Encodes every pair's source in one padded batch and steps each row through its decoder input
// (rows past their end are fed the decoder start token and not compared). One pair alone when
// `only` >= 0. Returns the largest |logit - reference| over every compared step.
inline double teacher_forced_error(const Model& model, const std::vector<Pair>& all,
                                   int only = -1) {
  std::vector<Pair> rows;
  if (only >= 0)
    rows.push_back(all[static_cast<std::size_t>(only)]);
  else
    rows = all;
  std::vector<std::vector<TokenId>> sources;
  std::size_t steps = 0;
  for (const Pair& p : rows) {
    sources.push_back(p.source);
    steps = std::max(steps, p.decoder_input.size());
  }
  const TokenId start = model.info().decoder_start;
  auto state = model.start(source_batch(sources, model.info().pad), nullptr);
  double worst = 0;
  Tensor logits;
  for (std::size_t t = 0; t < steps; ++t) {
    std::vector<TokenId> tokens;
    for (const Pair& p : rows)
      tokens.push_back(t < p.decoder_input.size() ? p.decoder_input[t] : start);
    StepInput input;
    input.tokens = tokens;
    model.step(*state, input, logits);
    for (std::size_t r = 0; r < rows.size(); ++r)
      if (t < rows[r].decoder_input.size())
        worst = std::max(
            worst, max_error(row_of(logits, static_cast<std::int64_t>(r)), rows[r].logits[t]));
  }
  return worst;
}

// Greedy decoding of one source on the KV cache: the model's forced first token (forced_bos)
// if it has one, then argmax until eos (not output) or max_new tokens.
inline std::vector<TokenId> greedy(const Model& model, const std::vector<TokenId>& source,
                                   int max_new) {
  auto state = model.start(source_batch({source}, model.info().pad), nullptr);
  std::vector<TokenId> out;
  TokenId next = model.info().decoder_start;
  Tensor logits;
  for (int step = 0; step < max_new; ++step) {
    StepInput input;
    input.tokens = std::span(&next, 1);
    model.step(*state, input, logits);
    next = step == 0 && model.info().forced_bos >= 0 ? model.info().forced_bos
                                                     : top_ids(row_of(logits, 0), 1)[0];
    if (next == model.info().eos) break;
    out.push_back(next);
  }
  return out;
}

inline std::string ids_line(const std::vector<TokenId>& ids) {
  std::string line;
  for (const TokenId id : ids) {
    if (!line.empty()) line += ' ';
    line += std::to_string(id);
  }
  return line + "\n";
}

// `masque run` of the seq2seq task on a variant's folder with the given decoder section, every
// pair's source on one line of ids; the output tokens per source.
inline std::vector<std::vector<TokenId>> run_seq2seq(const std::string& plugin,
                                                     const std::filesystem::path& folder,
                                                     const nlohmann::json& variant,
                                                     const std::string& decoder) {
  const auto dir = scratch_dir(plugin + "_cli_" + folder.filename().string());
  write_file(dir / "p.yaml", "task: seq2seq\nmodel:\n  plugin: " + plugin +
                                 "\n  path: " + folder.string() + "\ndecoder:\n" + decoder);
  std::string input;
  for (const Pair& p : pairs(variant)) input += ids_line(p.source);
  const RunResult r =
      run_masque({"run", (dir / "p.yaml").string(), "--input-format", "ids", "-q"}, input);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::vector<std::vector<TokenId>> out;
  for (const auto& line : parse_jsonl(r.out)) out.push_back(line["tokens"]);
  return out;
}

// Teacher-forced logits of every pair alone and of all pairs in one padded batch within kTol.
inline void check_teacher_forced(const Model& model, const nlohmann::json& variant) {
  const auto all = pairs(variant);
  double alone = 0;
  for (std::size_t i = 0; i < all.size(); ++i)
    alone = std::max(alone, teacher_forced_error(model, all, static_cast<int>(i)));
  const double batched = teacher_forced_error(model, all);
  INFO("max |logit - reference|: alone " << alone << ", batched " << batched);
  CHECK(alone < kTol);
  CHECK(batched < kTol);
}

// The plugin's TransformerSpec names every tensor of the folder's checkpoint exactly once (the
// names a trainer writes back under; a table shared by layers or tied to the head is listed
// once).
inline void check_spec_names(const Model& model, const std::filesystem::path& folder) {
  const auto* network = dynamic_cast<const transformer::TransformerModel*>(&model);
  REQUIRE(network != nullptr);
  std::set<std::string> named;
  for (const auto& p : transformer::parameters(network->spec())) CHECK(named.insert(p.name).second);
  const SafeTensors checkpoint = transformer::open_checkpoint(folder);
  const auto stored = checkpoint.names();
  CHECK(named == std::set<std::string>(stored.begin(), stored.end()));
}

// Greedy decoding of every pair's source gives the reference tokens.
inline void check_greedy(const Model& model, const nlohmann::json& variant) {
  for (const auto& p : variant["pairs"]) {
    REQUIRE(p["greedy_gap"].get<double>() > 1e-3);  // no float32 tie
    CHECK(greedy(model, p["source"].get<std::vector<TokenId>>(),
                 variant["max_new_tokens"].get<int>()) ==
          p["greedy_ids"].get<std::vector<TokenId>>());
  }
}

// `masque run` with the greedy and the beam decoder gives the reference tokens for every source.
inline void check_cli_decoding(const std::string& plugin, const std::filesystem::path& folder,
                               const nlohmann::json& variant) {
  const std::string max_new =
      "  max_new_tokens: " + std::to_string(variant["max_new_tokens"].get<int>()) + "\n";
  const auto greedy = run_seq2seq(plugin, folder, variant, "  plugin: greedy\n" + max_new);
  const auto beam = run_seq2seq(
      plugin, folder, variant,
      "  plugin: beam\n  beam_size: " + std::to_string(variant["beam_size"].get<int>()) + "\n" +
          max_new);
  REQUIRE(greedy.size() == variant["pairs"].size());
  REQUIRE(beam.size() == variant["pairs"].size());
  for (std::size_t i = 0; i < greedy.size(); ++i) {
    const nlohmann::json& p = variant["pairs"][i];
    INFO("source " << i);
    REQUIRE(p["beam_gap"].get<double>() > 1e-3);  // the best beam is not a float32 tie
    CHECK(greedy[i] == p["greedy_ids"].get<std::vector<TokenId>>());
    CHECK(beam[i] == p["beam_ids"].get<std::vector<TokenId>>());
  }
}

// A copy of `folder` in a scratch dir whose config.json has `edits` applied (null deletes a
// key); the checkpoint is linked, not copied.
inline std::filesystem::path edited_folder(const std::filesystem::path& folder,
                                           const std::string& name, const nlohmann::json& edits) {
  const auto dir = scratch_dir(name);
  nlohmann::json config = read_json(folder / "config.json");
  for (const auto& [key, value] : edits.items()) {
    if (value.is_null())
      config.erase(key);
    else
      config[key] = value;
  }
  write_file(dir / "config.json", config.dump(2));
  std::filesystem::remove(dir / "model.safetensors");
  std::filesystem::create_symlink(folder / "model.safetensors", dir / "model.safetensors");
  return dir;
}

// The message of the ConfigError loading `folder` throws ("" when it loads).
inline std::string load_error(const std::string& plugin, const std::filesystem::path& folder) {
  try {
    load_model(plugin, folder);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// The model's eos_token_id ends greedy decoding: with a config whose eos is a token the
// reference's greedy output produces (later than first where one does), every output stops
// before that token's first occurrence. (Logits do not depend on the eos id.)
inline void check_cli_end_token(const std::string& plugin, const std::filesystem::path& folder,
                                const nlohmann::json& variant) {
  TokenId eos = -1;
  for (const auto& p : variant["pairs"]) {
    const auto ids = p["greedy_ids"].get<std::vector<TokenId>>();
    for (std::size_t k = 1; k < ids.size() && eos < 0; ++k)
      if (std::find(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids[k]) ==
          ids.begin() + static_cast<std::ptrdiff_t>(k))
        eos = ids[k];
  }
  if (eos < 0) eos = variant["pairs"][0]["greedy_ids"][0].get<TokenId>();  // ends at once
  const auto edited =
      edited_folder(folder, plugin + "_eos_" + folder.filename().string(), {{"eos_token_id", eos}});
  const auto out = run_seq2seq(plugin, edited, variant,
                               "  plugin: greedy\n  max_new_tokens: " +
                                   std::to_string(variant["max_new_tokens"].get<int>()) + "\n");
  REQUIRE(out.size() == variant["pairs"].size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    auto want = variant["pairs"][i]["greedy_ids"].get<std::vector<TokenId>>();
    want.erase(std::find(want.begin(), want.end(), eos), want.end());
    INFO("source " << i << ", eos " << eos);
    CHECK(out[i] == want);
  }
}

}  // namespace masque::test::seq2seq

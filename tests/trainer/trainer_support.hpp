// What the trainer tests share: running the plain-torch reference trainer on a plan, loading a
// model of ../shared as a trainable network, and small deterministic token data.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../models/model_plugin.hpp"
#include "masque/safetensors.hpp"
#include "masque/tokenizer.hpp"
#include "masque/train/dataset.hpp"
#include "masque/train/network.hpp"
#include "masque/train/objective.hpp"
#include "masque/transformer/spec.hpp"

namespace masque::test::trainer {

struct ReferenceRun {
  std::vector<nlohmann::json> steps;  // the losses file: {"step", "loss", "lr", "grad_norm", ...}
  SafeTensors grads;                  // after the first step (when asked for)
};

// tests/trainer/reference_trainer.py on `plan` (written to a scratch folder named after `name`).
ReferenceRun run_reference(const nlohmann::json& plan, const std::string& name, bool grads);

struct LoadedModel {
  LoadedPlugin<Model> model;
  transformer::TransformerSpec spec;
  train::ParameterSet params;
};

// A model plugin on a folder, its spec and its checkpoint's tensors as trainable parameters.
LoadedModel load_model(const std::string& plugin, const std::filesystem::path& folder);

// WordPiece over bert-base-chinese's vocabulary ([CLS] 101, [SEP] 102, [MASK] 103).
LoadedPlugin<Tokenizer> chinese_wordpiece();

std::vector<const train::Example*> pointers(const std::vector<train::Example>& examples);

// n ids in [low, vocab) from a small deterministic pattern (different seeds, different lists).
std::vector<TokenId> tokens(int n, int seed, int vocab, int low = 5);

// A training setup both sides can run: the model, the objective and its masks, the examples as
// masque lays them out and as the reference's plan lists them (raw token lists).
struct Case {
  std::string name{}, plugin{};
  std::filesystem::path folder{};
  train::ObjectiveOptions objective{};
  std::string mask{}, source_mask{};  // mask plugins; source_mask for an encoder-decoder
  Params mask_params{};
  std::vector<train::Example> examples{};
  nlohmann::json plan{};  // model, objective, mask, special, examples
};

// tiny-bert-chinese, objective seq2seq under `mask` (seq2seq = UniLM, or causal); n examples.
Case unilm_case(const std::string& mask, int n = 3);
// tiny-bert-chinese, objective plm with explicit orders, the last 2 steps predicted.
Case plm_case(int n = 3);
// tiny-bert-chinese, objective diffusion (seed 3) under `mask` (bidirectional, or block-causal
// with blocks of 2: the BD3-LM layout); targets padded to source + slack slots (-1: none).
Case diffusion_case(const std::string& mask, int n = 3, int slack = -1);
// tiny-gpt2 or stories260k (plugin gpt2 or llama), objective causal-lm.
Case causal_case(const std::string& plugin, int n = 3);
// aren-transliteration, objective seq2seq with teacher forcing.
Case encdec_case(int n = 3);

// The objective of a case over its model (the masks it loads live in `masks`).
struct CaseObjective {
  LoadedPlugin<Tokenizer> tokenizer;
  LoadedPlugin<MaskStrategy> mask, source_mask;
  std::unique_ptr<train::Objective> objective;
};
CaseObjective make_objective(const Case& c, const ModelInfo& info);

}  // namespace masque::test::trainer

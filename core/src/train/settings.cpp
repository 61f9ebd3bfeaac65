#include "train/settings.hpp"

#include <algorithm>
#include <string>

#include "masque/error.hpp"

namespace masque::train {

namespace {

std::vector<ParamSpec> params() {
  return {
      // What is learned, from which data.
      {.name = "objective",
       .type = ParamType::string,
       .help = "what the network learns, tied to the mask: causal-lm (causal), mlm "
               "(bidirectional), seq2seq (seq2seq = UniLM, or causal, on one model; teacher "
               "forcing on an encoder-decoder), plm (permutation with stream: query), classify "
               "(bidirectional or causal: a *ForSequenceClassification folder's label head on "
               "[CLS] / the last token, labels from label_field), diffusion (bidirectional or "
               "block-causal: masked diffusion, the target's slots masked at a random ratio t and "
               "predicted with weight 1/t)",
       .choices = "causal-lm|mlm|seq2seq|plm|classify|diffusion",
       .flags = kParamRequired},
      {.name = "train_file",
       .type = ParamType::path,
       .help = "training records: text lines, TSV (a header line, or `columns`) or JSON lines "
               "(text, source/target, ids, order)",
       .flags = kParamRequired},
      {.name = "valid_file",
       .type = ParamType::path,
       .help = "validation records in the same format (empty: no validation)"},
      {.name = "output",
       .type = ParamType::path,
       .help = "the run folder: checkpoint-NNNNNN/ model folders, last and best links, "
               "metrics.jsonl, pipeline.yaml",
       .flags = kParamRequired | kParamMayBeMissing},
      {.name = "input_format",
       .type = ParamType::string,
       .default_value = "auto",
       .help = "format of both files: auto (by extension: .tsv, .jsonl/.json, else text)",
       .choices = "auto|text|tsv|jsonl"},
      {.name = "columns",
       .type = ParamType::string_list,
       .default_value = "[]",
       .help = "TSV column names when the files have no header line (e.g. source,target)"},
      {.name = "field",
       .type = ParamType::string,
       .default_value = "text",
       .help = "the text column / JSON field (causal-lm, mlm, plm, diffusion)"},
      {.name = "source_field",
       .type = ParamType::string,
       .default_value = "source",
       .help = "seq2seq: the source column / field"},
      {.name = "target_field",
       .type = ParamType::string,
       .default_value = "target",
       .help = "seq2seq: the target column / field"},
      {.name = "order_field",
       .type = ParamType::string,
       .default_value = "order",
       .help = "plm: a record's factorization order (a JSON list of positions); records "
               "without one use the mask's order"},
      {.name = "label_field",
       .type = ParamType::string,
       .default_value = "label",
       .help = "classify: the column / field holding each record's label (a name of config.json's "
               "id2label, or its index)"},
      {.name = "max_length",
       .type = ParamType::integer,
       .default_value = "0",
       .help = "records with more input tokens are skipped and reported (0: the model's "
               "positions)",
       .min = 0},
      {.name = "max_bad_records",
       .type = ParamType::integer,
       .default_value = "100",
       .help = "skipped records (bad UTF-8, not JSON, empty, too long) past this stop the run "
               "with exit 2 (-1: no limit); every skip is reported with its line",
       .min = -1},
      {.name = "mlm_probability",
       .type = ParamType::number,
       .default_value = "0.15",
       .help = "mlm: share of tokens chosen, in (0, 1] (80 % [MASK], 10 % random, 10 % kept)",
       .max = 1},
      {.name = "plm_predict",
       .type = ParamType::integer,
       .default_value = "0",
       .help = "plm: predict the last K tokens of the order (0: use plm_fraction)",
       .min = 0},
      {.name = "plm_fraction",
       .type = ParamType::number,
       .default_value = "0.1667",
       .help = "plm: K = max(1, round(fraction x length)) when plm_predict is 0 (XLNet: 1/6); in "
               "(0, 1]",
       .max = 1},
      {.name = "plm_target_slack",
       .type = ParamType::integer,
       .default_value = "-1",
       .help = "plm and diffusion on source/target records (the source is given, the target "
               "permuted or noised): pad the target with [SEP] to (source tokens + slack) slots, "
               "so the generating task's template `source [SEP] [MASK] x (tokens + slack)` "
               "needs no target length; -1: the target's own length; longer targets are "
               "skipped and reported",
       .min = -1},
      {.name = "diffusion_eps",
       .type = ParamType::number,
       .default_value = "0.001",
       .help = "diffusion: each record's masking ratio t is drawn uniformly from (eps, 1]; in "
               "[0, 1)",
       .min = 0,
       .max = 1},
      {.name = "label_smoothing",
       .type = ParamType::number,
       .default_value = "0",
       .help = "cross-entropy label smoothing as torch defines it",
       .min = 0,
       .max = 1},
      // Batches and length of the run.
      {.name = "batch_size",
       .type = ParamType::integer,
       .default_value = "32",
       .help = "records per micro-batch (a cap when max_tokens is set)",
       .min = 1},
      {.name = "max_tokens",
       .type = ParamType::integer,
       .default_value = "0",
       .help = "> 0: micro-batches of as many records as fit this many padded tokens",
       .min = 0},
      {.name = "accumulation",
       .type = ParamType::integer,
       .default_value = "1",
       .help = "micro-batches per optimizer step (gradient accumulation)",
       .min = 1},
      {.name = "shuffle",
       .type = ParamType::boolean,
       .default_value = "true",
       .help = "shuffle each epoch (seeded); false: batch k is records kN ... kN+N-1 in file "
               "order"},
      {.name = "seed",
       .type = ParamType::integer,
       .default_value = "0",
       .help = "shuffling, mlm and diffusion corruption and from-scratch initialisation",
       .min = 0},
      {.name = "epochs",
       .type = ParamType::integer,
       .default_value = "1",
       .help = "passes over the training data (when steps is 0)",
       .min = 1},
      {.name = "steps",
       .type = ParamType::integer,
       .default_value = "0",
       .help = "optimizer steps of the run (0: epochs x steps per epoch)",
       .min = 0},
      {.name = "max_minutes",
       .type = ParamType::number,
       .default_value = "0",
       .help =
           "stop (with a checkpoint and validation) after this much training wall time; "
           "checked after each step, so a run makes at least one; the schedule still spans `steps` "
           "(0: no limit)",
       .min = 0},
      {.name = "init",
       .type = ParamType::string,
       .default_value = "auto",
       .help = "pretrained: fine-tune the model folder's weights; scratch: initialise from its "
               "config.json as the original model does (seeded); auto: pretrained when the "
               "folder has weights",
       .choices = "auto|scratch|pretrained"},
      {.name = "dropout",
       .type = ParamType::string,
       .default_value = "config",
       .help = "config: the dropout rates of the model's config.json (BERT hidden_dropout_prob "
               "and attention_probs_dropout_prob, GPT-2 embd/resid/attn_pdrop, Llama "
               "attention_dropout, encoder-decoder dropout/attention_dropout/"
               "activation_dropout), or a number p in [0, 1): p at each of those places (0: "
               "none); masks seeded by (seed, step, record), never at validation"},
      {.name = "matmul_dtype",
       .type = ParamType::string,
       .default_value = "f32",
       .help = "f32, or bf16: every linear layer's matmuls (forward and backward) in bf16 with "
               "f32 master weights, gradients and optimizer state (CPUs with bf16 "
               "instructions; elsewhere a clear error)",
       .choices = "f32|bf16"},
      // The optimizer (torch.optim.AdamW) and the schedule (Hugging Face's).
      {.name = "lr",
       .type = ParamType::number,
       .default_value = "5e-5",
       .help = "peak learning rate",
       .min = 0},
      {.name = "schedule",
       .type = ParamType::string,
       .default_value = "linear",
       .help = "learning rate after warmup: linear (to 0 at the last step), cosine, constant",
       .choices = "linear|cosine|constant"},
      {.name = "warmup_steps",
       .type = ParamType::integer,
       .default_value = "0",
       .help = "linear warmup from 0 (step 0 has lr 0 when > 0)",
       .min = 0},
      {.name = "warmup_ratio",
       .type = ParamType::number,
       .default_value = "0",
       .help = "warmup as a share of the run's steps (when warmup_steps is 0)",
       .min = 0,
       .max = 1},
      {.name = "weight_decay",
       .type = ParamType::number,
       .default_value = "0.01",
       .help = "AdamW's decoupled weight decay, on matrices and embeddings only",
       .min = 0},
      {.name = "adam_beta1",
       .type = ParamType::number,
       .default_value = "0.9",
       .help = "AdamW: decay of the first moment (torch betas[0])",
       .min = 0,
       .max = 1},
      {.name = "adam_beta2",
       .type = ParamType::number,
       .default_value = "0.999",
       .help = "AdamW: decay of the second moment (torch betas[1])",
       .min = 0,
       .max = 1},
      {.name = "adam_epsilon",
       .type = ParamType::number,
       .default_value = "1e-8",
       .help = "AdamW: added to sqrt(v) after bias correction (torch eps); > 0 (0 divides "
               "by zero where a gradient is 0)"},
      {.name = "max_grad_norm",
       .type = ParamType::number,
       .default_value = "1.0",
       .help = "clip the gradient's global norm to this (0: no clipping)",
       .min = 0},
      // What is kept and reported.
      {.name = "save_every",
       .type = ParamType::integer,
       .default_value = "0",
       .help = "write a checkpoint every N steps (0: only at the end, on validation bests and "
               "on SIGINT/SIGTERM)",
       .min = 0},
      {.name = "keep_last",
       .type = ParamType::integer,
       .default_value = "2",
       .help = "step checkpoints kept besides the best",
       .min = 1,
       .max = 1000000},
      {.name = "valid_every",
       .type = ParamType::integer,
       .default_value = "0",
       .help = "validate every N steps (0: at the end only); a new best is checkpointed and "
               "linked as OUT/best",
       .min = 0},
      {.name = "valid_batch_size",
       .type = ParamType::integer,
       .default_value = "64",
       .help = "records per validation batch",
       .min = 1},
      {.name = "log_every",
       .type = ParamType::integer,
       .default_value = "100",
       .help = "off a terminal, a progress line on stderr every N steps (0: none); on a "
               "terminal one live line",
       .min = 0},
  };
}

float parse_dropout(const std::string& text) {
  if (text == "config") return -1.0f;
  std::size_t used = 0;
  double p = -1;
  try {
    p = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !(p >= 0.0 && p < 1.0))
    throw ConfigError("task.dropout: expected `config` or a probability in [0, 1), got '" + text +
                      "'");
  return static_cast<float>(p);
}

}  // namespace

const TaskSpec& train_task_spec() {
  static const TaskSpec spec{
      .name = "train",
      .description =
          "train the pipeline's model under its mask: `masque train PIPELINE` (not "
          "`masque run`); writes model folders `masque run` loads unchanged",
      .params = params(),
      .required_sections = {"model", "tokenizer", "mask"},
      .optional_sections = {"target_tokenizer"},
      .default_plugins = {},
  };
  return spec;
}

TrainSettings train_settings(const Params& p) {
  TrainSettings s;
  s.train_file = p.get_string("train_file");
  s.valid_file = p.get_string("valid_file");
  s.output = p.get_string("output");
  std::string format = p.get_string("input_format");
  if (format == "auto") {
    const std::string ext = s.train_file.extension().string();
    format = ext == ".tsv" ? "tsv" : ext == ".jsonl" || ext == ".json" ? "jsonl" : "text";
  }
  s.input.format = parse_input_format(format);
  s.input.columns = p.get_string_list("columns");
  s.input.field = p.get_string("field");

  ObjectiveOptions& o = s.objective;
  o.kind = parse_objective(p.get_string("objective"));
  o.source_field = p.get_string("source_field");
  o.target_field = p.get_string("target_field");
  o.order_field = p.get_string("order_field");
  o.label_field = p.get_string("label_field");
  o.mlm_probability = p.get_number("mlm_probability");
  o.plm_predict = static_cast<std::int32_t>(p.get_int("plm_predict"));
  o.plm_fraction = p.get_number("plm_fraction");
  o.plm_target_slack = static_cast<std::int32_t>(p.get_int("plm_target_slack"));
  o.diffusion_eps = p.get_number("diffusion_eps");
  o.seed = static_cast<std::uint64_t>(p.get_int("seed"));
  o.max_tokens = static_cast<std::int32_t>(p.get_int("max_length"));
  // The reader's main field: a seq2seq record (and a plm record with a target column) is read
  // by its source.
  const auto& columns = s.input.columns;
  if (o.kind == ObjectiveKind::seq2seq ||
      ((o.kind == ObjectiveKind::plm || o.kind == ObjectiveKind::diffusion) &&
       std::find(columns.begin(), columns.end(), o.target_field) != columns.end()))
    s.input.field = o.source_field;

  TrainerOptions& t = s.trainer;
  t.batch_size = static_cast<std::size_t>(p.get_int("batch_size"));
  t.max_tokens = p.get_int("max_tokens");
  t.accumulation = static_cast<std::int32_t>(p.get_int("accumulation"));
  t.shuffle = p.get_bool("shuffle");
  t.seed = o.seed;
  t.adamw = {.beta1 = p.get_number("adam_beta1"),
             .beta2 = p.get_number("adam_beta2"),
             .eps = p.get_number("adam_epsilon"),
             .weight_decay = p.get_number("weight_decay")};
  for (const char* key : {"adam_beta1", "adam_beta2"})
    if (p.get_number(key) >= 1)
      throw ConfigError(std::string("task.") + key +
                        ": must be below 1 (AdamW divides by 1 - beta^t)");
  if (!(t.adamw.eps > 0))
    throw ConfigError(
        "task.adam_epsilon: must be > 0 (with 0 AdamW divides 0 by 0 where a "
        "gradient is 0)");
  const std::string schedule = p.get_string("schedule");
  t.schedule.kind = schedule == "cosine"     ? ScheduleKind::cosine
                    : schedule == "constant" ? ScheduleKind::constant
                                             : ScheduleKind::linear;
  t.schedule.base_lr = p.get_number("lr");
  t.schedule.warmup_steps = p.get_int("warmup_steps");
  t.max_grad_norm = p.get_number("max_grad_norm");
  t.label_smoothing = p.get_number("label_smoothing");

  s.epochs = p.get_int("epochs");
  s.steps = p.get_int("steps");
  s.warmup_ratio = p.get_number("warmup_ratio");
  s.max_minutes = p.get_number("max_minutes");
  s.save_every = p.get_int("save_every");
  s.keep_last = static_cast<int>(p.get_int("keep_last"));
  s.valid_every = p.get_int("valid_every");
  s.valid_batch_size = p.get_int("valid_batch_size");
  s.log_every = p.get_int("log_every");
  s.max_bad_records = p.get_int("max_bad_records");
  s.matmul_dtype = p.get_string("matmul_dtype") == "bf16" ? DType::bf16 : DType::f32;
  s.dropout = parse_dropout(p.get_string("dropout"));
  const std::string init = p.get_string("init");
  s.init = init == "scratch"      ? InitMode::scratch
           : init == "pretrained" ? InitMode::pretrained
                                  : InitMode::automatic;
  return s;
}

}  // namespace masque::train

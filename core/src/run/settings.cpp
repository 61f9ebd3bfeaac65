#include "run/settings.hpp"

namespace masque {

const std::vector<ParamSpec>& run_param_specs() {
  static const std::vector<ParamSpec> params = {
      {.name = "max_batch_size",
       .type = ParamType::integer,
       .default_value = "32",
       .help = "most records in one batch",
       .min = 1,
       .max = 65536},
      {.name = "max_batch_tokens",
       .type = ParamType::integer,
       .default_value = "16384",
       .help = "most tokens in one batch, counted with padding (records x longest record)",
       .min = 1},
      {.name = "read_ahead",
       .type = ParamType::integer,
       .default_value = "0",
       .help = "records read ahead and sorted by length before batching (0 = 16 x max_batch_size); "
               "bounds memory, output stays in input order",
       .min = 0},
      {.name = "batching",
       .type = ParamType::string,
       .default_value = "static",
       .help =
           "lm-generate, plm-generate and seq2seq (not with return_attention/replace_unknowns): "
           "continuous keeps up to max_batch_size rows decoding (a record's beams are rows) and "
           "starts the next records as rows finish (started max_batch_size records at a time "
           "within max_batch_tokens); static decodes each batch until its longest record "
           "ends. Same outputs either way; continuous is faster where a step is memory-bound "
           "(a large model at a few rows: GPT-2-small at 8 rows 1.4x), about as fast elsewhere "
           "(bench/generate); --summary's rows_per_step tells how full the steps ran; other "
           "tasks batch statically",
       .choices = "continuous|static"},
      {.name = "invalid_utf8",
       .type = ParamType::string,
       .default_value = "error",
       .help = "a record with invalid UTF-8: error (an error record in its place) or replace "
               "(invalid bytes become U+FFFD)",
       .choices = "error|replace"},
      {.name = "max_record_bytes",
       .type = ParamType::integer,
       .default_value = "16777216",
       .help = "longer input records become error records (their bytes are not kept in memory)",
       .min = 1},
  };
  return params;
}

bool is_run_param(const std::string& key) {
  for (const ParamSpec& spec : run_param_specs())
    if (key == spec.name) return true;
  return false;
}

BatchingOptions batching_from(const Params& p) {
  BatchingOptions b;
  b.max_batch_size = static_cast<std::size_t>(p.get_int("max_batch_size"));
  b.max_batch_tokens = static_cast<std::size_t>(p.get_int("max_batch_tokens"));
  b.read_ahead = static_cast<std::size_t>(p.get_int("read_ahead"));
  return b;
}

void apply_input_limits(const Params& p, InputOptions& input) {
  input.max_record_bytes = static_cast<std::size_t>(p.get_int("max_record_bytes"));
  input.replace_invalid_utf8 = p.get_string("invalid_utf8") == "replace";
}

}  // namespace masque

// masque eval: word and token error rates of hypotheses against references with alternatives
// (G2P pronunciations, transliterations, any output with several right answers).
#include <iostream>

#include "common.hpp"
#include "eval_data.hpp"
#include "eval_metrics.hpp"
#include "masque/error.hpp"

namespace masque::cli {

namespace {
const char* kHelp = R"(Usage: masque eval --ref REFERENCES [HYPOTHESES] [options]

Scores hypotheses (one token sequence per word) against references (one or more correct token
sequences per word). Tokens are separated by spaces.

  word error rate  (WER)  the fraction of words whose hypothesis equals none of their references
  token error rate (TER, PER for phones)  sum over words of the edit distance (substitutions,
      insertions, deletions) to the closest reference, over the sum of those references'
      lengths; on ties the first reference listed is the closest

both overall and by source length (the key's characters, or its tokens when it has spaces).

REFERENCES: lines `key<TAB>ref 1<TAB>ref 2...`. A key may repeat on later lines and its
references are merged, so a `source<TAB>target` TSV with one line per correct answer works as is
(scripts/g2p-data.sh writes both kinds). The words are the distinct keys in order of first
appearance.

HYPOTHESES (a file, or stdin when absent or -), by --hyp-format:
  text   line i is the hypothesis of word i (an empty line is an empty hypothesis)
  jsonl  `masque run` output: record i is word i, the hypothesis is in --field (a string of
         space-separated tokens or an array of strings; a name starting with / is a JSON
         pointer, e.g. /hypotheses/1/text); an error record ({"id", "error"}) counts as an
         empty hypothesis and is reported; a record's "id", when present, must be i
  tsv    `key<TAB>hypothesis` lines in any order, one for every key of REFERENCES
  auto   (default) jsonl when the first line starts with '{', else text

Bad input (an empty file, a missing or extra hypothesis, an unknown or repeated key, an empty
reference, a line that is not JSON) is an error naming the file and line: exit code 2.

Examples:
  masque run PIPELINE < data/g2p/test.words | masque eval --ref data/g2p/test.ref.tsv
  masque eval --ref data/g2p/test.tsv hyp.txt --token-name phone --json
  masque eval --ref refs.tsv --hyp-format tsv keyed.tsv --buckets 3,6,9

Exit codes: 0 ok; 2 usage error or bad input.
)";
}  // namespace

int cmd_eval(int argc, char** argv) {
  po::options_description o("Evaluation");
  o.add_options()("help,h", "this help")("ref,r", po::value<std::string>(),
                                         "references file (required)")(
      "hyp", po::value<std::string>()->default_value("-"), "hypotheses file (- = stdin)")(
      "hyp-format", po::value<std::string>()->default_value("auto"),
      "auto, text, jsonl or tsv (see above)")(
      "field", po::value<std::string>()->default_value("text"),
      "jsonl: the member holding the hypothesis (or a JSON pointer)")(
      "buckets", po::value<std::string>()->default_value("4,6,8,10,12"),
      "ascending upper bounds of the source-length buckets (4,6 gives 1-4, 5-6 and 7+)")(
      "length-unit", po::value<std::string>()->default_value("auto"),
      "source length in: auto, chars (UTF-8 code points) or tokens")(
      "token-name", po::value<std::string>()->default_value("token"),
      "what a token is called in the table (phone: the rate is printed as PER)")(
      "json", po::bool_switch(), "print the scores as one JSON object");
  po::positional_options_description pos;
  pos.add("hyp", 1);
  po::variables_map vm = parse(argc, argv, o, {}, pos);
  if (vm.count("help")) {
    std::cout << kHelp << "\n" << o << "\n";
    return kExitOk;
  }
  if (!vm.count("ref"))
    throw ConfigError("masque eval: missing --ref REFERENCES (see masque eval --help)");
  const std::string token_name = vm["token-name"].as<std::string>();
  if (token_name.empty()) throw ConfigError("--token-name: must not be empty");
  const std::vector<std::size_t> bounds = eval::parse_bounds(vm["buckets"].as<std::string>());
  const eval::LengthUnit unit = eval::parse_length_unit(vm["length-unit"].as<std::string>());
  const eval::HypFormat format = eval::parse_hyp_format(vm["hyp-format"].as<std::string>());

  const std::string ref_file = vm["ref"].as<std::string>();
  const eval::References refs = eval::parse_references(eval::read_whole_file(ref_file), ref_file);
  const std::string hyp_path = vm["hyp"].as<std::string>();
  const std::string hyp_name = hyp_path == "-" ? "<stdin>" : hyp_path;
  const eval::Hypotheses hyps = eval::parse_hypotheses(eval::read_whole_file(hyp_path), hyp_name,
                                                       format, vm["field"].as<std::string>(), refs);

  const eval::Report report = eval::evaluate(refs, hyps, bounds, unit);
  if (vm["json"].as<bool>())
    std::cout << eval::to_json(report).dump() << "\n";
  else
    std::cout << eval::format_text(report, token_name);
  return kExitOk;
}

}  // namespace masque::cli

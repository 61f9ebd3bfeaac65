// Beam search exactly as CTranslate2 implements it (decoding.cc, BeamSearch::search):
//
// 1. A record starts with one beam (its prompt), cumulative score 0 (with a vocabulary
//    smaller than 2K: K copies, all but the first scored as the lowest float).
// 2. Each step adds every beam's cumulative score to its token log-probs and takes the best
//    C = 2K (beam, token) candidates, best first (ties: lower beam, then lower token id).
// 3. Candidates 0..K-1 fill the K beam slots. A candidate whose token is an end token (past
//    the forced prefix), or any candidate at the record's last allowed step, becomes a
//    finished hypothesis with its un-normalized score; its slot is refilled by the next unused
//    candidate among K..C-1 that is not an end token (none left: the slot keeps it).
// 4. The record stops at its last step, or once round(K * patience) hypotheses are finished
//    (length_penalty 0: once candidate 0 has finished at some step and num_hypotheses are).
// 5. Finished scores are divided by length^length_penalty (length counting the forced prefix
//    and the end token), sorted best first, and the best num_hypotheses returned.
//
// Forced prefix: while step < prefix length every candidate is the prefix token from beam 0,
// scored 0 in slot 0 and -1e10 in the others; at the first free step, an end-token candidate
// in positions 1..C-1 becomes token 0 from beam 0 with score -1e10, so that a secondary beam
// cannot end the prefix at once. Forced tokens are not scored.
//
// Where masque differs, on purpose: the prefix rules apply to a record only when it has a
// forced prefix (CTranslate2 applies the end-token rule to every record of a batch in which
// any record has one, so a record's result depended on its batch); scores are accumulated in
// double, not float (only near-exact ties can order differently).
#pragma once

#include <cstdint>
#include <vector>

#include "masque/decoder.hpp"
#include "masque/decoding.hpp"

namespace masque::beam {

struct BeamOptions {
  std::int32_t beam_size = 4;
  double patience = 1.0;
  std::int32_t num_hypotheses = 1;
};

// round(beam_size * patience) in float, as CTranslate2 computes it.
std::int32_t max_finished(const BeamOptions& options);

std::vector<DecodeResult> beam_search(Stepper& stepper, const DecodingOptions& options,
                                      const BeamOptions& beam);

}  // namespace masque::beam

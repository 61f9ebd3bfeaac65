#include "tasks/plm.hpp"

#include "masque/error.hpp"

namespace masque {

PlmMethod parse_plm_method(const std::string& name) {
  if (name == "query-stream") return PlmMethod::query_stream;
  if (name == "incremental") return PlmMethod::incremental;
  if (name == "visible-mask") return PlmMethod::visible_mask;
  throw ConfigError("unknown permutation-LM method '" + name + "'");
}

bool is_context_token(const Tokenizer* tokenizer, TokenId id) {
  if (!tokenizer) return false;
  const SpecialTokens& s = tokenizer->special_tokens();
  return id >= 0 && (id == s.cls || id == s.sep || id == s.bos || id == s.eos || id == s.pad);
}

std::vector<std::int32_t> resolve_order(const MaskStrategy& mask, std::int32_t slots,
                                        const std::vector<std::int32_t>& explicit_order,
                                        std::uint64_t record_id) {
  MaskRequest request;
  request.length = slots;
  request.order = explicit_order;
  request.record_id = record_id;
  SequenceMask m = mask.build(request);
  if (static_cast<std::int32_t>(m.order.size()) != slots)
    throw ConfigError(
        "the permutation-LM tasks need a mask strategy that gives a factorization order "
        "(mask: {plugin: permutation})");
  return m.order;
}

SequenceMask query_stream_mask(std::size_t length, const std::vector<std::int32_t>& slots,
                               const std::vector<std::int32_t>& order) {
  const std::size_t m = slots.size();
  SequenceMask mask;
  mask.rank.assign(length + m, -1);
  mask.role.assign(length + m, TokenRole::content);
  for (std::size_t t = 0; t < m; ++t) mask.rank[slots[order[t]]] = static_cast<std::int32_t>(t);
  for (std::size_t t = 0; t < m; ++t) {
    mask.rank[length + t] = static_cast<std::int32_t>(t) - 1;
    mask.role[length + t] = TokenRole::query;
    mask.query_positions.push_back(slots[order[t]]);
  }
  mask.order = order;
  return mask;
}

}  // namespace masque

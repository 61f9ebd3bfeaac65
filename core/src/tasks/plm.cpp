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

std::vector<std::uint8_t> context_flags(std::size_t length,
                                        const std::vector<std::int32_t>& slots) {
  std::vector<std::uint8_t> context(length, 1);
  for (std::int32_t p : slots) context[static_cast<std::size_t>(p)] = 0;
  return context;
}

SequenceMask query_stream_mask(const MaskStrategy& mask, std::size_t length,
                               const std::vector<std::int32_t>& slots,
                               const std::vector<std::int32_t>& order, std::uint64_t record_id) {
  const std::vector<std::uint8_t> context = context_flags(length, slots);
  MaskRequest request;
  request.length = static_cast<std::int32_t>(length);
  request.order = order;
  request.record_id = record_id;
  request.context = context;
  request.query_stream = true;
  SequenceMask m = mask.build(request);
  if (m.query_positions.size() != slots.size() || m.size() != length + slots.size())
    throw ConfigError(
        "the query-stream method needs a mask strategy with a query stream (mask: {plugin: "
        "permutation})");
  return m;
}

}  // namespace masque

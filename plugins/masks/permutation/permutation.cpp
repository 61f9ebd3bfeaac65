// Mask strategy `permutation` (XLNet's idea): with a factorization order pi, the token at
// position pi_t sees itself and pi_1 .. pi_{t-1}. rank = index of the position in the order.
//
// With `stream: query` (or a request asking for it) the strategy also appends one query token
// per ordered position: the query for step t carries position pi_t and sees only the content
// of pi_1 .. pi_{t-1} (and itself), so all steps of p(x_{pi_t} | x_{pi_<t}) come out of one
// forward pass. Tokens a request marks as context ([CLS], [SEP], a template's given words)
// stay outside the order: rank -1, seen by every token, seeing only the other context.
#include <charconv>
#include <cstdint>
#include <string>
#include <vector>

#include "masque/error.hpp"
#include "masque/mask.hpp"
#include "masque/params.hpp"

namespace {

enum class OrderKind { left_to_right, right_to_left, random, explicit_order };

// splitmix64: a small, fully specified generator, so random orders are the same on every
// platform and standard library (std::shuffle's algorithm is unspecified).
std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::vector<std::int32_t> parse_order(const std::string& text) {
  std::vector<std::int32_t> order;
  const char* p = text.data();
  const char* end = p + text.size();
  while (p < end) {
    while (p < end && (*p == ' ' || *p == ',')) ++p;
    if (p == end) break;
    std::int32_t v = 0;
    auto [next, ec] = std::from_chars(p, end, v);
    if (ec != std::errc() || v < 0)
      throw masque::ConfigError(
          "mask.order: expected left-to-right, right-to-left, random or a comma-separated list "
          "of positions such as 3,1,4,2,0; got '" +
          text + "'");
    order.push_back(v);
    p = next;
  }
  return order;
}

void check_permutation(const std::vector<std::int32_t>& order, std::int32_t length) {
  if (order.size() != static_cast<std::size_t>(length))
    throw masque::RecordError("the order has " + std::to_string(order.size()) +
                              " positions but the sequence has " + std::to_string(length) +
                              " tokens");
  std::vector<bool> seen(length, false);
  for (std::int32_t p : order) {
    if (p < 0 || p >= length || seen[p])
      throw masque::RecordError("the order is not a permutation of 0.." +
                                std::to_string(length - 1) + " (position " + std::to_string(p) +
                                (p >= 0 && p < length ? " repeats)" : " is out of range)"));
    seen[p] = true;
  }
}

class PermutationMask final : public masque::MaskStrategy {
 public:
  explicit PermutationMask(const masque::Params& params)
      : seed_(static_cast<std::uint64_t>(params.get_int("seed"))),
        query_stream_(params.get_string("stream") == "query") {
    const std::string& order = params.get_string("order");
    if (order == "left-to-right")
      kind_ = OrderKind::left_to_right;
    else if (order == "right-to-left")
      kind_ = OrderKind::right_to_left;
    else if (order == "random")
      kind_ = OrderKind::random;
    else {
      kind_ = OrderKind::explicit_order;
      explicit_ = parse_order(order);
      try {
        check_permutation(explicit_, static_cast<std::int32_t>(explicit_.size()));
      } catch (const masque::RecordError& e) {  // a setting, not a record: nothing may run
        throw masque::ConfigError("mask.order: " + std::string(e.what()));
      }
    }
  }

  masque::SequenceMask build(const masque::MaskRequest& request) const override {
    const std::vector<std::int32_t> slots = ordered_positions(request);
    const auto m = static_cast<std::int32_t>(slots.size());
    masque::SequenceMask mask;
    mask.order = resolve_order(request, m);
    check_permutation(mask.order, m);
    const bool queries = query_stream_ || request.query_stream;
    const std::size_t n = static_cast<std::size_t>(request.length);
    const std::size_t total = n + (queries ? slots.size() : 0);
    mask.rank.assign(total, -1);  // context: seen by every token, sees the other context
    mask.role.assign(total, masque::TokenRole::content);
    for (std::int32_t t = 0; t < m; ++t) mask.rank[slots[mask.order[t]]] = t;
    if (queries) {
      for (std::int32_t t = 0; t < m; ++t) {
        mask.rank[n + t] = t - 1;  // sees the context and the content of steps 0..t-1
        mask.role[n + t] = masque::TokenRole::query;
        mask.query_positions.push_back(slots[mask.order[t]]);
      }
    }
    return mask;
  }

  // Valid when tokens are appended in generation order (each new one ranks above the cache).
  bool supports_incremental() const override { return true; }

 private:
  // The positions that take part in the order: all but the request's context tokens.
  static std::vector<std::int32_t> ordered_positions(const masque::MaskRequest& request) {
    const std::size_t n = static_cast<std::size_t>(request.length);
    if (!request.context.empty() && request.context.size() != n)
      throw masque::RecordError("the context flags have " + std::to_string(request.context.size()) +
                                " entries for " + std::to_string(n) + " tokens");
    std::vector<std::int32_t> slots;
    for (std::size_t p = 0; p < n; ++p)
      if (request.context.empty() || !request.context[p])
        slots.push_back(static_cast<std::int32_t>(p));
    return slots;
  }

  // The order over `n` ordered tokens (indexes into them, first to last).
  std::vector<std::int32_t> resolve_order(const masque::MaskRequest& request,
                                          std::int32_t n) const {
    if (!request.order.empty()) return {request.order.begin(), request.order.end()};
    std::vector<std::int32_t> order(n);
    for (std::int32_t i = 0; i < n; ++i) order[i] = i;
    switch (kind_) {
      case OrderKind::left_to_right:
        break;
      case OrderKind::right_to_left:
        for (std::int32_t i = 0; i < n; ++i) order[i] = n - 1 - i;
        break;
      case OrderKind::random: {
        std::uint64_t state = seed_ ^ (request.record_id * 0xd1342543de82ef95ull);
        for (std::int32_t i = n - 1; i > 0; --i) {
          auto j = static_cast<std::int32_t>(splitmix64(state) % static_cast<std::uint64_t>(i + 1));
          std::swap(order[i], order[j]);
        }
        break;
      }
      case OrderKind::explicit_order:
        return explicit_;
    }
    return order;
  }

  OrderKind kind_ = OrderKind::left_to_right;
  std::vector<std::int32_t> explicit_;
  std::uint64_t seed_ = 0;
  bool query_stream_ = false;
};

masque::Plugin* create(const masque::Params& params) {
  return new PermutationMask(params);
}

const masque::ParamSpec kParams[] = {
    {.name = "order",
     .type = masque::ParamType::string,
     .default_value = "left-to-right",
     .help = "factorization order: left-to-right, right-to-left, random (seeded, one order per "
             "record) or explicit 0-based positions first to last, e.g. 3,1,4,2,0; a record's "
             "own `order` field takes precedence"},
    {.name = "seed",
     .type = masque::ParamType::integer,
     .default_value = "0",
     .help = "seed of the random order (combined with the record number)",
     .min = 0},
    {.name = "stream",
     .type = masque::ParamType::string,
     .default_value = "content",
     .help = "content: one token per position; query: also append a query token per position "
             "that predicts it from the positions before it in the order (one-pass scoring)",
     .choices = "content|query"},
};

const masque::PluginDescriptor* descriptor() {
  static const masque::PluginDescriptor d{
      .kind = masque::PluginKind::mask,
      .name = "permutation",
      .version = "1.0.0",
      .license = "MIT",
      .description = "a token sees itself and the tokens before it in a factorization order",
      .params = kParams,
      .num_params = sizeof(kParams) / sizeof(kParams[0]),
      .create = create,
  };
  return &d;
}

}  // namespace

MASQUE_PLUGIN(descriptor)

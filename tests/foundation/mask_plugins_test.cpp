// The permutation strategy's query stream with context tokens (moved here from the
// permutation-LM tasks, which now ask the plugin for it) and the strategies the tasks hold.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <random>

#include "masque/error.hpp"
#include "masque/mask.hpp"
#include "pipeline.hpp"
#include "registry.hpp"
#include "test_support.hpp"

using namespace masque;

namespace {

struct LoadedMask {
  std::unique_ptr<Registry> registry;
  std::unique_ptr<MaskStrategy> mask;
};

LoadedMask load(const std::string& name, const std::map<std::string, std::string>& set = {}) {
  LoadedMask m;
  m.registry = std::make_unique<Registry>(std::vector<std::filesystem::path>{test::plugin_dir()});
  const PluginEntry& entry = m.registry->find(PluginKind::mask, name);
  Params params = default_params(*entry.descriptor);
  for (const auto& [k, v] : set)
    for (std::size_t i = 0; i < entry.descriptor->num_params; ++i)
      if (k == entry.descriptor->params[i].name)
        params.set(k, parse_param_value(entry.descriptor->params[i], v));
  m.mask.reset(static_cast<MaskStrategy*>(m.registry->create(entry, params).release()));
  return m;
}

// The query-stream mask as the plm tasks built it before it moved into the plugin: context
// ranks -1, slot order[t] ranks t, query t ranks t - 1 and predicts slot order[t].
SequenceMask reference_query_stream(std::size_t length, const std::vector<std::int32_t>& slots,
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

SequenceMask build(const MaskStrategy& mask, std::size_t length,
                   const std::vector<std::uint8_t>& context, const std::vector<std::int32_t>& order,
                   bool query_stream) {
  MaskRequest request;
  request.length = static_cast<std::int32_t>(length);
  request.context = context;
  request.order = order;
  request.query_stream = query_stream;
  return mask.build(request);
}

}  // namespace

TEST_CASE("permutation: the query stream over CLS a b c SEP with context tokens", "[mask][plm]") {
  auto perm = load("permutation");
  // Slots are positions 1, 2, 3; the order 2, 0, 1 visits positions 3, 1, 2.
  const std::vector<std::uint8_t> context{1, 0, 0, 0, 1};
  SequenceMask m = build(*perm.mask, 5, context, {2, 0, 1}, true);
  REQUIRE(m.size() == 8);
  CHECK(m.order == std::vector<std::int32_t>{2, 0, 1});
  CHECK(m.query_positions == std::vector<std::int32_t>{3, 1, 2});
  CHECK(m.rank == std::vector<std::int32_t>{-1, 1, 2, 0, -1, -1, 0, 1});
  // Context sees context only; every token sees the context.
  CHECK(m.allowed(0, 4));
  CHECK_FALSE(m.allowed(0, 3));
  for (std::size_t i = 0; i < 8; ++i) CHECK(m.allowed(i, 0));
  // Query 0 (predicting position 3) sees the context and itself; query 1 also sees position 3.
  CHECK_FALSE(m.allowed(5, 3));
  CHECK(m.allowed(5, 5));
  CHECK(m.allowed(6, 3));
  CHECK_FALSE(m.allowed(6, 1));
  // No token sees a query but itself.
  for (std::size_t i = 0; i < 8; ++i)
    for (std::size_t q = 5; q < 8; ++q) CHECK(m.allowed(i, q) == (i == q));
}

TEST_CASE("permutation: the plugin's query stream equals the one the tasks used to build",
          "[mask][plm]") {
  auto perm = load("permutation");
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const std::size_t n = 1 + rng() % 9;
    std::vector<std::uint8_t> context(n);
    std::vector<std::int32_t> slots;
    for (std::size_t p = 0; p < n; ++p) {
      context[p] = rng() % 3 == 0;
      if (!context[p]) slots.push_back(static_cast<std::int32_t>(p));
    }
    std::vector<std::int32_t> order(slots.size());
    for (std::size_t t = 0; t < order.size(); ++t) order[t] = static_cast<std::int32_t>(t);
    std::shuffle(order.begin(), order.end(), rng);
    if (order.empty()) continue;
    const SequenceMask got = build(*perm.mask, n, context, order, true);
    const SequenceMask want = reference_query_stream(n, slots, order);
    INFO("trial " << trial);
    CHECK(got.rank == want.rank);
    CHECK(got.role == want.role);
    CHECK(got.query_positions == want.query_positions);
    CHECK(got.order == want.order);
  }
}

TEST_CASE("permutation: queries come from the strategy's setting or the request", "[mask][plm]") {
  auto content = load("permutation", {{"order", "right-to-left"}});
  SequenceMask plain = build(*content.mask, 3, {}, {}, false);
  CHECK(plain.size() == 3);
  CHECK(plain.order == std::vector<std::int32_t>{2, 1, 0});
  CHECK(plain.rank == std::vector<std::int32_t>{2, 1, 0});
  SequenceMask asked = build(*content.mask, 3, {}, {}, true);
  CHECK(asked.size() == 6);
  CHECK(asked.query_positions == std::vector<std::int32_t>{2, 1, 0});
  auto query = load("permutation", {{"stream", "query"}});
  CHECK(build(*query.mask, 3, {}, {}, false).size() == 6);
  // The strategy's order runs over the ordered tokens only.
  SequenceMask ctx = build(*content.mask, 4, {1, 0, 0, 1}, {}, true);
  CHECK(ctx.order == std::vector<std::int32_t>{1, 0});
  CHECK(ctx.query_positions == std::vector<std::int32_t>{2, 1});
  CHECK_THROWS_AS(build(*content.mask, 3, {1, 0}, {}, false), RecordError);
  CHECK_THROWS_AS(build(*content.mask, 4, {1, 0, 0, 1}, {0, 1, 2}, false), RecordError);
}

TEST_CASE("bidirectional: context flags and the query-stream request change nothing", "[mask]") {
  auto visible = load("bidirectional");
  SequenceMask m = build(*visible.mask, 3, {1, 0, 1}, {}, true);
  CHECK(m.rank == std::vector<std::int32_t>{0, 0, 0});
  CHECK(m.query_positions.empty());
}

namespace {

// Which keys each query sees, as rows of 0/1 ("1100" = the first two).
std::vector<std::string> pattern(const SequenceMask& m) {
  std::vector<std::string> rows;
  for (std::size_t i = 0; i < m.size(); ++i) {
    std::string row;
    for (std::size_t j = 0; j < m.size(); ++j) row += m.allowed(i, j) ? '1' : '0';
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

TEST_CASE("block-causal: bidirectional within blocks and causal across them", "[mask]") {
  auto blocks = load("block-causal", {{"block_size", "2"}});
  MaskRequest request;
  request.length = 5;
  const SequenceMask m = blocks.mask->build(request);
  CHECK(m.rank == std::vector<std::int32_t>{0, 0, 1, 1, 2});
  CHECK(pattern(m) == std::vector<std::string>{"11000", "11000", "11110", "11110", "11111"});
  CHECK_FALSE(blocks.mask->supports_incremental());
  // Block size 1 is causal; a block as long as the sequence is bidirectional.
  auto one = load("block-causal", {{"block_size", "1"}});
  CHECK(pattern(one.mask->build(request)) ==
        std::vector<std::string>{"10000", "11000", "11100", "11110", "11111"});
  auto whole = load("block-causal", {{"block_size", "8"}});
  CHECK(pattern(whole.mask->build(request)) == std::vector<std::string>(5, "11111"));
}

TEST_CASE("block-causal: a seq2seq source is one block of its own", "[mask]") {
  auto blocks = load("block-causal", {{"block_size", "2"}});
  const std::vector<std::int32_t> segments = {0, 0, 0, 1, 1, 1};
  MaskRequest request;
  request.length = 6;
  request.segments = segments;
  const SequenceMask m = blocks.mask->build(request);
  CHECK(m.rank == std::vector<std::int32_t>{0, 0, 0, 1, 1, 2});
  CHECK(pattern(m) ==
        std::vector<std::string>{"111000", "111000", "111000", "111110", "111110", "111111"});
  const std::vector<std::int32_t> bad = {0, 1, 0};
  request.length = 3;
  request.segments = bad;
  CHECK_THROWS_WITH(blocks.mask->build(request),
                    Catch::Contains("a source token (segment 0) after the target"));
}

TEST_CASE("block-causal: the query stream is BD3-LM's noised copy of the target", "[mask]") {
  auto blocks = load("block-causal", {{"block_size", "2"}});
  const std::vector<std::int32_t> segments = {0, 0, 1, 1, 1};
  MaskRequest request;
  request.length = 5;
  request.segments = segments;
  request.query_stream = true;
  const SequenceMask m = blocks.mask->build(request);
  // Tokens: source 0-1, clean blocks {2, 3} and {4}, then their copies 5-6 and 7.
  CHECK(m.query_positions == std::vector<std::int32_t>{2, 3, 4});
  CHECK(m.rank == std::vector<std::int32_t>{0, 0, 1, 1, 2, 0, 0, 1});
  CHECK(m.role[5] == TokenRole::block_query);
  // A copy sees the source, the clean blocks before its own and its own block's copies; no
  // clean token sees a copy.
  CHECK(pattern(m) == std::vector<std::string>{"11000000", "11000000", "11110000", "11110000",
                                               "11111000", "11000110", "11000110", "11110001"});
  // Without segments every token has a copy; the first block's copies see only each other.
  MaskRequest text;
  text.length = 3;
  text.query_stream = true;
  CHECK(pattern(blocks.mask->build(text)) ==
        std::vector<std::string>{"110000", "110000", "111000", "000110", "000110", "110001"});
  // The padded batch layout evaluates the same rule.
  AttentionLayout layout;
  layout.reset(1, 9);
  layout.set_row(0, m);
  for (std::int32_t i = 0; i < 9; ++i)
    for (std::int32_t j = 0; j < 9; ++j)
      CHECK(layout.allowed(0, i, j) == (i < 8 && j < 8 && m.allowed(i, j)));
}

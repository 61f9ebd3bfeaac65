// TransformerSpec is plain data: parameters() lists each named tensor once with its shape and
// role, and a tied head adds nothing.
#include <catch2/catch.hpp>

#include "masque/transformer/spec.hpp"

using namespace masque;
using namespace masque::transformer;

TEST_CASE("parameters() lists every tensor of a spec once, tied heads included",
          "[transformer][spec]") {
  TransformerSpec s{.architecture = "tiny", .vocab_size = 10};
  s.decoder.hidden = 4;
  s.decoder.embeddings.tokens = {"wte", {10, 4}};
  s.decoder.embeddings.positions = {
      .kind = PositionKind::learned, .max_positions = 8, .table = {"wpe", {8, 4}}};
  BlockSpec& b = s.decoder.blocks.emplace_back();
  b.attention_norm = norm(NormKind::layer_norm, "ln_1", 4, 1e-5f);
  b.attention.projections = {linear("qkv", 12, 4, true, WeightLayout::in_out)};
  b.attention.output = linear("proj", 4, 4, false);
  b.mlp_norm = norm(NormKind::rms_norm, "ln_2", 4, 1e-6f);
  b.mlp = {.kind = MlpKind::gated,
           .activation = Activation::silu,
           .in = {linear("gate", 6, 4, false), linear("up", 6, 4, false)},
           .out = linear("down", 4, 6, false)};
  s.head.output.weight = s.decoder.embeddings.tokens;  // tied

  const auto params = parameters(s);
  std::vector<std::string> names;
  for (const auto& p : params) names.push_back(p.name);
  CHECK(names == std::vector<std::string>{"wte", "wpe", "ln_1.weight", "ln_1.bias", "qkv.weight",
                                          "qkv.bias", "proj.weight", "ln_2.weight", "gate.weight",
                                          "up.weight", "down.weight"});
  CHECK(params[4].shape == Shape{4, 12});  // in_out: [in, out]
  CHECK(params[0].role == ParameterRole::embedding);
  CHECK(params[3].role == ParameterRole::norm_bias);
  CHECK(params[5].role == ParameterRole::bias);
  CHECK(params[10].role == ParameterRole::matrix);
  CHECK(b.attention.projections[0].out_features() == 12);
  CHECK(b.attention.projections[0].in_features() == 4);
  CHECK_FALSE(b.mlp_norm.bias.present());  // RMSNorm has no bias
  CHECK_FALSE(s.encoder_decoder());
}

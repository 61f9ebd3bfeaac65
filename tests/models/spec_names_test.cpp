// Every model plugin's TransformerSpec names exactly the tensors of its checkpoint: the name
// map a trainer writes weights back under.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "masque/safetensors.hpp"
#include "masque/transformer/model.hpp"
#include "model_plugin.hpp"

using namespace masque;
using namespace masque::test;

TEST_CASE("each plugin's spec names every checkpoint tensor once", "[transformer][spec]") {
  struct Case {
    const char* plugin;
    const char* folder;
    std::set<std::string> unused;  // checkpoint tensors the network does not read (none here)
  };
  const Case cases[] = {
      {"gpt2", "tiny-gpt2", {}},
      {"llama", "stories260k", {}},
      {"bert", "tiny-bert-uncased", {}},
      {"encoder-decoder", "aren-transliteration", {}},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.plugin) {
      const auto folder = shared_dir() / "models" / c.folder;
      Params params;
      params.set("path", folder.string());
      if (std::string(c.plugin) == "bert") params.set("mlm_head", true);
      auto model = load_plugin<Model>("model", c.plugin, params);
      const auto* transformer = dynamic_cast<const transformer::TransformerModel*>(model.get());
      REQUIRE(transformer != nullptr);
      std::set<std::string> named;
      for (const auto& p : transformer::parameters(transformer->spec()))
        CHECK(named.insert(p.name).second);
      const SafeTensors st = transformer::open_checkpoint(folder);
      std::set<std::string> stored;
      for (const auto& name : st.names())
        if (!c.unused.count(name)) stored.insert(name);
      CHECK(named == stored);
    }
  }
}

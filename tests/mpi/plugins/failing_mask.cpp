// Mask strategy `test-failing`: causal, but on one rank of an mpirun job (Open MPI's
// OMPI_COMM_WORLD_RANK = MASQUE_TEST_FAIL_RANK) every layout after its first
// MASQUE_TEST_FAIL_AFTER throws: an error inside a training step on one rank only, for the
// test that the job still keeps its last whole step (tests/mpi/mpi_test.cpp). From the
// environment, not parameters: the run it leaves resumes with the same pipeline.
#include <atomic>
#include <cstdlib>
#include <string>

#include "masque/error.hpp"
#include "masque/mask.hpp"
#include "masque/params.hpp"

namespace {

class FailingMask final : public masque::MaskStrategy {
 public:
  FailingMask(bool failing_rank, std::int64_t fail_after)
      : failing_rank_(failing_rank), fail_after_(fail_after) {}

  masque::SequenceMask build(const masque::MaskRequest& request) const override {
    if (failing_rank_ && ++layouts_ > fail_after_)
      throw masque::RuntimeError("test-failing: layout " + std::to_string(layouts_.load()) +
                                 " fails on purpose");
    masque::SequenceMask mask;
    mask.rank.resize(request.length);
    for (std::int32_t i = 0; i < request.length; ++i) mask.rank[i] = i;
    mask.role.assign(request.length, masque::TokenRole::content);
    return mask;
  }
  bool supports_incremental() const override { return true; }

 private:
  bool failing_rank_;
  std::int64_t fail_after_;
  mutable std::atomic<std::int64_t> layouts_{0};
};

masque::Plugin* create(const masque::Params&) {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  const char* fail_rank = std::getenv("MASQUE_TEST_FAIL_RANK");
  const char* fail_after = std::getenv("MASQUE_TEST_FAIL_AFTER");
  const bool failing = rank && fail_rank && fail_after && std::string(rank) == fail_rank;
  return new FailingMask(failing, failing ? std::stoll(fail_after) : 0);
}

const masque::PluginDescriptor* descriptor() {
  static const masque::PluginDescriptor d{
      .kind = masque::PluginKind::mask,
      .name = "test-failing",
      .version = "1.0.0",
      .license = "MIT",
      .description = "causal, but failing on one rank after a number of layouts (tests only)",
      .params = nullptr,
      .num_params = 0,
      .create = create,
  };
  return &d;
}

}  // namespace

MASQUE_PLUGIN(descriptor)

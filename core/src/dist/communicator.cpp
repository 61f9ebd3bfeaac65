// The parts of dist.hpp that do not need MPI: the single-process communicator, the launcher
// detection and the choice of world().
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "dist/mpi_communicator.hpp"
#include "masque/dist.hpp"
#include "masque/error.hpp"

namespace masque::dist {

Communicator::~Communicator() = default;

std::string Communicator::where() const {
  if (!uses_mpi()) return "";
  return "rank " + std::to_string(rank()) + " of " + std::to_string(size()) + " on " + host();
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "unknown host";
  return name;
}

namespace {

// Rank 0 of 1: every collective is the identity.
class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  const std::string& host() const override { return host_; }
  bool uses_mpi() const override { return false; }
  void barrier() override {}
  void all_reduce_sum(std::span<float>) override {}
  void all_reduce_sum(std::span<double>) override {}
  void all_reduce_sum(std::span<std::uint64_t>) override {}
  std::vector<std::string> gather(std::string_view bytes, int) override {
    return {std::string(bytes)};
  }
  std::vector<std::string> all_gather(std::string_view bytes) override {
    return {std::string(bytes)};
  }
  void broadcast(std::string&, int) override {}
  void send(std::string_view, int dest, int) override {
    throw RuntimeError("send to rank " + std::to_string(dest) + " in a single process");
  }
  std::string receive(int source, int) override {
    throw RuntimeError("receive from rank " + std::to_string(source) + " in a single process");
  }
  [[noreturn]] void abort(int code) override { std::_Exit(code); }

 private:
  std::string host_ = host_name();
};

}  // namespace

std::unique_ptr<Communicator> single_process() {
  return std::make_unique<SingleProcess>();
}

bool mpi_compiled() {
#ifdef MASQUE_WITH_MPI
  return true;
#else
  return false;
#endif
}

std::string mpi_version() {
  return mpi_compiled() ? mpi_library_version() : "not compiled in";
}

// Open MPI's mpirun sets OMPI_COMM_WORLD_SIZE; PMIx and PMI launchers (srun, MPICH's
// mpiexec) set PMIX_RANK or PMI_RANK. Without any of them MPI_Init would start a singleton,
// which is slower and needs nothing here.
bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(name)) return true;
  return false;
}

int launched_ranks() {
  if (!launched_by_mpi()) return 1;
  // Slurm's count only with its own launch (PMIx or PMI2 under srun): mpirun inside an
  // allocation sets OMPI_COMM_WORLD_SIZE, read first.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"}) {
    const char* value = std::getenv(name);
    if (!value) continue;
    char* end = nullptr;
    const long n = std::strtol(value, &end, 10);
    return end != value && *end == '\0' && n > 0 && n <= 1 << 24 ? static_cast<int>(n) : 0;
  }
  return 0;
}

void check_ranks_supported(const std::string& alone, const std::string& instead, bool compiled) {
  const int ranks = launched_ranks();
  if (compiled || ranks == 1) return;
  const std::string each =
      ranks > 1 ? "each of the " + std::to_string(ranks) + " processes" : "each of the processes";
  throw ConfigError("this masque was built without MPI, so " + each +
                    " the launcher started would " + alone +
                    "; rebuild with libopenmpi-dev installed (masque --version says whether MPI "
                    "is compiled in)" +
                    instead);
}

void finalize() {
  if (mpi_compiled() && launched_by_mpi()) finalize_mpi();
}

Communicator& world() {
  static std::unique_ptr<Communicator> world = [] {
    if (mpi_compiled() && launched_by_mpi()) return mpi_world();
    check_ranks_supported();  // one process of several would act as all of them
    return single_process();
  }();
  return *world;
}

}  // namespace masque::dist

// Processes that work together: the ranks of an MPI job (Open MPI's mpirun, Slurm's srun), or
// one process alone. Corpus runs (masque run) and data-parallel training use this one interface;
// they never call MPI themselves.
//
// Every reduction is done in a fixed rank order (0, 1, ..., N-1), so its result is the same on
// every rank and does not depend on which rank finished first: N processes give the same
// numbers on every run.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace masque::dist {

class Communicator {
 public:
  virtual ~Communicator();

  virtual int rank() const = 0;  // 0 .. size()-1
  virtual int size() const = 0;
  // The ranks on this machine, and this one's place among them (to split the cores).
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  virtual const std::string& host() const = 0;  // this machine's name, for messages
  // True when running under MPI (even with one rank), false for the single-process fallback.
  virtual bool uses_mpi() const = 0;

  virtual void barrier() = 0;

  // Element-wise sum over all ranks, left to right in rank order: every rank gets
  // ((x_0 + x_1) + x_2) + ... in the element's own type, bit-identical on every rank and run.
  virtual void all_reduce_sum(std::span<float> data) = 0;
  virtual void all_reduce_sum(std::span<double> data) = 0;
  virtual void all_reduce_sum(std::span<std::uint64_t> data) = 0;

  // Every rank's bytes, by rank, on `root` (other ranks get an empty vector).
  virtual std::vector<std::string> gather(std::string_view bytes, int root) = 0;
  // Every rank's bytes, by rank, on every rank.
  virtual std::vector<std::string> all_gather(std::string_view bytes) = 0;
  // `bytes` of `root` on every rank.
  virtual void broadcast(std::string& bytes, int root) = 0;

  // Point to point, any size (sent in pieces); `tag` matches a send with its receive.
  virtual void send(std::string_view bytes, int dest, int tag) = 0;
  virtual std::string receive(int source, int tag) = 0;

  // Ends every rank of the job with `code` (MPI_Abort); the single process just exits.
  [[noreturn]] virtual void abort(int code) = 0;

  // "rank 1 of 3 on host-a" (or "" for the single process), to prefix messages with.
  std::string where() const;
};

// Whether this build has MPI compiled in (CMake found it: MASQUE_WITH_MPI).
bool mpi_compiled();
// For --version: the MPI library's own version line, or "not compiled in".
std::string mpi_version();
// Whether this process was started by an MPI launcher (mpirun, mpiexec, srun with PMI/PMIx).
bool launched_by_mpi();
// How many processes the launcher started, as it says (OMPI_COMM_WORLD_SIZE, PMI_SIZE, Slurm's
// SLURM_STEP_NUM_TASKS); 1 when not launched by one, 0 when the launcher does not say.
int launched_ranks();
// ConfigError when a launcher started several processes (or did not say how many) but `compiled`
// is false: without MPI they cannot be ranks of one job. The message says that each would
// `alone` ("run the whole corpus"), and ends with `instead` (", or use --shard K/N").
void check_ranks_supported(const std::string& alone = "do the whole job alone",
                           const std::string& instead = "", bool compiled = mpi_compiled());

// The job's communicator: MPI's world when compiled in and launched by an MPI launcher
// (MPI is initialized on the first call), else the single-process one. Finalized at exit.
// Without MPI compiled in, a launch of several processes is a ConfigError
// (check_ranks_supported).
Communicator& world();
// Ends MPI when world() started it; for a process about to leave through std::_Exit (a
// normal exit finalizes by itself). Every rank must call it.
void finalize();

// A communicator for one process alone (rank 0 of 1), whatever the build.
std::unique_ptr<Communicator> single_process();

}  // namespace masque::dist

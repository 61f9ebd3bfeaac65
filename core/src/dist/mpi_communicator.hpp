// The MPI communicator behind dist::world() (only in builds with MASQUE_WITH_MPI).
#pragma once

#include <memory>
#include <string>

#include "masque/dist.hpp"

namespace masque::dist {

// MPI_COMM_WORLD, initializing MPI (MPI_THREAD_FUNNELED: only the main thread calls it) and
// finalizing it at exit. RuntimeError in builds without MPI.
std::unique_ptr<Communicator> mpi_world();

std::string host_name();
// MPI_Finalize if MPI was initialized and is not finalized yet.
void finalize_mpi();
// MPI_Get_library_version's first line (callable before MPI_Init).
std::string mpi_library_version();  // gethostname, for messages

}  // namespace masque::dist

// masque run over shards of a corpus file: under mpirun/srun (one or more shards per rank,
// assembled on rank 0), with --resume (finishing a run that failed), or --shard K/N (one shard,
// for GNU parallel and other launchers). docs/scale-out.md describes them.
#pragma once

#include "common.hpp"
#include "masque/dist.hpp"
#include "run/shard.hpp"

namespace masque::cli {

// Worker threads per process when --threads is not given under MPI: the cores this process
// may use (mpirun binds ranks to cores) shared among the ranks on this machine.
int default_threads(const dist::Communicator& comm);

// Every rank of the job runs its shards; rank 0 writes OUT (docs/scale-out.md). Needs -i FILE
// and -o FILE. Returns the exit code, the same on every rank.
int run_sharded(const Pipeline& pipeline, const Registry& registry, const po::variables_map& vm);

// One shard of the input, written to -o (under a temporary name until it is complete).
int run_one_shard(const Pipeline& pipeline, const Registry& registry, const po::variables_map& vm,
                  ShardSpec shard);

}  // namespace masque::cli

// masque run over shards of a corpus file: under mpirun/srun (one or more shards per rank,
// assembled on rank 0), with --resume (finishing a run that failed), or --shard K/N (one shard,
// for GNU parallel and other launchers). docs/scale-out.md describes them.
#pragma once

#include "common.hpp"
#include "masque/dist.hpp"
#include "run/shard.hpp"

namespace masque::cli {

// Every rank of the job runs its shards; rank 0 writes OUT (docs/scale-out.md). Needs -i FILE
// and -o FILE. Returns the exit code, the same on every rank.
int run_sharded(const Pipeline& pipeline, const Registry& registry, const po::variables_map& vm);

// One shard of the input, written to -o (under a temporary name until it is complete).
int run_one_shard(const Pipeline& pipeline, const Registry& registry, const po::variables_map& vm,
                  ShardSpec shard);

// One process over the whole input (not under mpirun, no --shard). With -i FILE and -o FILE
// (jsonl, tsv or nbest) the run is resumable: OUT.parts/manifest.json records what writes OUT
// until the run finishes, and --resume keeps OUT's complete records, drops a trailing partial
// one and runs only the records after them, so OUT ends byte for byte as an uninterrupted
// run's. A different input or pipeline is refused; the parts of a sharded run go to
// run_sharded. Other runs stream as run_pipeline does.
int run_single(const Pipeline& pipeline, const Registry& registry, const po::variables_map& vm);

}  // namespace masque::cli

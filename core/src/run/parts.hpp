// The parts of a sharded corpus run (masque run under mpirun, or --resume): each finished
// shard's output and summary sit in OUT.parts/ until all are there; then they are
// concatenated in shard order into OUT (written under a temporary name and renamed, so OUT
// never exists incomplete). A failed run leaves its finished shards behind for --resume.
//
//   OUT.parts/manifest.json     what the parts belong to (input, shard count, settings)
//   OUT.parts/part-K            shard K's output, complete (renamed from part-K.tmp)
//   OUT.parts/part-K.json       shard K's figures, written last: the shard is done
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace masque {

class PartsDir {
 public:
  explicit PartsDir(const std::filesystem::path& output);

  const std::filesystem::path& path() const { return dir_; }
  std::filesystem::path part(int shard) const;  // part-K
  std::filesystem::path temp(int shard) const;  // part-K.tmp, being written

  // A fresh, empty directory with this manifest (any old parts are removed).
  void create(const nlohmann::ordered_json& manifest) const;
  // The manifest of an earlier run, or null when there is none.
  nlohmann::ordered_json manifest() const;

  // part-K.tmp becomes part-K, then its figures are written: from then on the shard is done.
  void commit(int shard, const nlohmann::ordered_json& figures) const;
  bool done(int shard) const;
  nlohmann::ordered_json figures(int shard) const;

  // Concatenates part-0 .. part-(count-1) into `output` (through a temporary name) and
  // removes the directory.
  void assemble(int count, const std::filesystem::path& output) const;

 private:
  std::filesystem::path dir_;
};

}  // namespace masque

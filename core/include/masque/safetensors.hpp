// Reader for Hugging Face safetensors checkpoints (https://github.com/huggingface/safetensors).
//
// A file is memory-mapped once; F32 tensors are zero-copy views that keep the mapping alive, so
// a SafeTensors object can be dropped while tensors taken from it live on. Sharded checkpoints
// are read through `model.safetensors.index.json` (its `weight_map`). Headers are validated
// strictly when the file is opened; every failure is a ConfigError naming the file and, where
// there is one, the tensor.
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/config.hpp>

#include "masque/tensor.hpp"

namespace masque {

struct SafeTensorEntry {
  std::string name;
  std::string dtype_name;      // as in the header: "F32", "BF16", "I64", ...
  std::optional<DType> dtype;  // set when masque can hold the dtype (F32, F16, BF16, I32, I8, U8)
  Shape shape;
  std::filesystem::path file;  // the shard holding the tensor
  std::size_t offset = 0;      // byte offset of the data in `file`
  std::size_t size = 0;        // bytes
};

class BOOST_SYMBOL_VISIBLE SafeTensors {
 public:
  SafeTensors() = default;
  // Opens a checkpoint folder (model.safetensors.index.json, else model.safetensors), a
  // .safetensors file, or an index .json file.
  static SafeTensors open(const std::filesystem::path& path);
  // A checkpoint held in memory (e.g. freshly initialised weights): the tensors as given (f32,
  // f16, bf16, i32, i8 or u8), shared rather than copied; `label` names it in messages.
  static SafeTensors held(std::map<std::string, Tensor> tensors, std::filesystem::path label);

  const std::filesystem::path& path() const;  // what was opened
  bool contains(std::string_view name) const;
  std::vector<std::string> names() const;  // sorted
  std::size_t size() const;
  // Throws ConfigError naming the checkpoint and the tensor when it is missing.
  const SafeTensorEntry& entry(std::string_view name) const;
  // `__metadata__` of the (first) file.
  const std::map<std::string, std::string>& metadata() const;

  // The tensor as stored (F32, F16, BF16, I32, I8, U8): a zero-copy view of the mapping.
  Tensor get(std::string_view name) const;
  // As f32: a zero-copy view for F32, a converted owned copy for F16 / BF16.
  Tensor get_f32(std::string_view name) const;
  // Same, and the shape must be `expected` (ConfigError naming file, tensor and both shapes).
  Tensor get_f32(std::string_view name, const Shape& expected) const;
  // The tensor as stored (F32, F16 or BF16: a view of the mapping, no copy), with the shape
  // `expected` and every value finite, checked in its stored type.
  Tensor get_float(std::string_view name, const Shape& expected) const;

  // Drops the tensor's pages from memory (madvise MADV_DONTNEED over the whole pages of its
  // span), for a weight that has been copied into a packed or quantized layout: the mapped source
  // must not stay resident beside its copy. Views stay valid: a page touched again is read from
  // the file again. Nothing for tensors held in memory.
  void release(std::string_view name) const;
  // The same for the tensor's first `leading_bytes` (a weight consumed in order: its pages go as
  // it is read, so a large one is never resident whole beside its copy).
  void release(std::string_view name, std::size_t leading_bytes) const;
  // Tells the kernel that the tensor will be read a few rows at a time from now on (an embedding
  // table read in place: madvise MADV_RANDOM), so that a lookup faults in its page rather than
  // the page cache's whole folio around it. Not for a tensor that is read again in order.
  void read_rows_at_random(std::string_view name) const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace masque

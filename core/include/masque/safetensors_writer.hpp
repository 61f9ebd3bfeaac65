// Writer for Hugging Face safetensors files, the reader's counterpart (safetensors.hpp).
//
// The file is written whole or not at all: the bytes go to a temporary file next to the target,
// are flushed to disk, and the temporary is renamed over the target. Tensors are written in the
// order given; the header lists them sorted by name, as the Python library does.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <boost/config.hpp>

#include "masque/tensor.hpp"

namespace masque {

struct NamedTensor {
  std::string name;
  Tensor tensor;  // f32, f16, bf16, i32 or i8; contiguous
};

// Throws RuntimeError naming the file on I/O failure and ConfigError on a duplicate or empty
// name (nothing is left behind in either case).
BOOST_SYMBOL_VISIBLE void write_safetensors(
    const std::filesystem::path& file, const std::vector<NamedTensor>& tensors,
    const std::map<std::string, std::string>& metadata = {});

// Writes `text` to `file` through a temporary and a rename (a file that exists is whole).
BOOST_SYMBOL_VISIBLE void write_file_atomically(const std::filesystem::path& file,
                                                const std::string& text);

}  // namespace masque

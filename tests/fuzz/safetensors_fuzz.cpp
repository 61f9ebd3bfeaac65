// Fuzz target: safetensors headers and sharded-checkpoint indexes (SafeTensors::open).
//
// First byte even: the rest is a .safetensors file. Odd: the rest is a
// model.safetensors.index.json in a folder that also holds two valid shards and a truncated
// one, so the index can name real, missing and broken shards. Every tensor that opens must lie
// inside its file and be readable to its last byte.
#include <cstring>
#include <vector>

#include "fuzz_support.hpp"
#include "masque/error.hpp"
#include "masque/safetensors.hpp"

namespace {

namespace fs = std::filesystem;
using masque::fuzz::scratch_dir;

// A minimal safetensors file: the 8-byte little-endian header length, the header, the data.
std::string safetensors_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}

const fs::path& index_folder() {
  static const fs::path dir = [] {
    fs::path d = scratch_dir() / "sharded";
    fs::create_directories(d);
    masque::fuzz::write_bytes(
        d / "a.safetensors",
        safetensors_file(R"({"x":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
                         R"("y":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]},)"
                         R"("__metadata__":{"format":"pt"}})",
                         std::string(22, '\x3f')));
    masque::fuzz::write_bytes(
        d / "b.safetensors",
        safetensors_file(R"({"z":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},)"
                         R"("w":{"dtype":"I64","shape":[1],"data_offsets":[4,12]}})",
                         std::string(12, '\x01')));
    masque::fuzz::write_bytes(d / "bad.safetensors", std::string("\xff\x00\x00", 3));
    return d;
  }();
  return dir;
}

// Reads every byte of the tensor so a span outside the mapping faults here.
void touch(const masque::Tensor& t) {
  const auto* p = static_cast<const unsigned char*>(t.raw());
  unsigned sum = 0;
  for (std::size_t i = 0; i < t.bytes(); ++i) sum += p[i];
  volatile unsigned sink = sum;
  (void)sink;
}

void check_entries(const masque::SafeTensors& st) {
  (void)st.metadata();
  for (const std::string& name : st.names()) {
    const masque::SafeTensorEntry& e = st.entry(name);
    MASQUE_FUZZ_CHECK(e.offset + e.size <= fs::file_size(e.file));
    MASQUE_FUZZ_CHECK(e.offset >= 8);
    try {
      touch(st.get(name));
      masque::Tensor f = st.get_f32(name);
      MASQUE_FUZZ_CHECK(f.dtype() == masque::DType::f32);
      MASQUE_FUZZ_CHECK(f.shape() == e.shape);
      touch(f);
      (void)st.get_f32(name, {1, 2, 3});
    } catch (const masque::ConfigError&) {
      // An unsupported dtype or the wrong shape: reported, as it should be.
    }
  }
  try {
    (void)st.entry("no such tensor");
    MASQUE_FUZZ_CHECK(st.contains("no such tensor"));
  } catch (const masque::ConfigError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool index = data[0] & 1;
  const std::string_view rest = masque::fuzz::as_text(data + 1, size - 1);
  fs::path target;
  if (index) {
    target = index_folder();
    masque::fuzz::write_bytes(target / "model.safetensors.index.json", rest);
  } else {
    target = scratch_dir() / "one.safetensors";
    masque::fuzz::write_bytes(target, rest);
  }
  try {
    check_entries(masque::SafeTensors::open(target));
  } catch (const masque::ConfigError&) {
    // A clear refusal is the expected outcome for most inputs.
  }
  return 0;
}

#include "masque/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <span>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "json_depth.hpp"
#include "masque/error.hpp"

namespace masque {

namespace fs = std::filesystem;

namespace {

// A read-only mapping of a whole file; tensors viewing it hold it through shared_ptr.
class Mapping {
 public:
  explicit Mapping(const fs::path& file) {
    int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw ConfigError(file.string() + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      throw ConfigError(file.string() + ": cannot stat: " + std::strerror(err));
    }
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        int err = errno;
        ::close(fd);
        throw ConfigError(file.string() + ": cannot map: " + std::strerror(err));
      }
      data_ = static_cast<const std::uint8_t*>(p);
    }
    ::close(fd);
  }
  ~Mapping() {
    if (data_) ::munmap(const_cast<std::uint8_t*>(data_), size_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

struct DTypeInfo {
  const char* name;
  std::size_t size;
  std::optional<DType> dtype;
};

// Every dtype the safetensors format defines; masque holds six of them (I8 and U8: quantized
// weights).
const DTypeInfo* find_dtype(const std::string& name) {
  static const DTypeInfo table[] = {
      {"F32", 4, DType::f32},    {"F16", 2, DType::f16},       {"BF16", 2, DType::bf16},
      {"I32", 4, DType::i32},    {"F64", 8, std::nullopt},     {"I64", 8, std::nullopt},
      {"U64", 8, std::nullopt},  {"U32", 4, std::nullopt},     {"I16", 2, std::nullopt},
      {"U16", 2, std::nullopt},  {"I8", 1, DType::i8},         {"U8", 1, DType::u8},
      {"BOOL", 1, std::nullopt}, {"F8_E4M3", 1, std::nullopt}, {"F8_E5M2", 1, std::nullopt},
  };
  for (const auto& info : table)
    if (name == info.name) return &info;
  return nullptr;
}

[[noreturn]] void fail(const fs::path& file, const std::string& what) {
  throw ConfigError(file.string() + ": " + what);
}
[[noreturn]] void fail(const fs::path& file, const std::string& tensor, const std::string& what) {
  throw ConfigError(file.string() + ": tensor '" + tensor + "': " + what);
}

std::uint64_t read_u64_le(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

std::uint64_t json_u64(const nlohmann::json& v, const fs::path& file, const std::string& tensor,
                       const char* what) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0))
    fail(file, tensor, std::string(what) + " must hold non-negative integers, got " + v.dump());
  return v.get<std::uint64_t>();
}

}  // namespace

struct SafeTensors::Impl {
  fs::path path;
  fs::path listing;  // the file that lists the tensors (the index, or the one file): errors name it
  std::map<std::string, SafeTensorEntry, std::less<>> entries;
  std::map<std::string, std::string> metadata;
  std::map<fs::path, std::shared_ptr<const Mapping>> mappings;
  std::map<std::string, Tensor, std::less<>> held;  // SafeTensors::held

  void add_file(const fs::path& file, bool first);
  void add_index(const fs::path& index);
  const SafeTensorEntry& entry(std::string_view name) const;
};

namespace {

SafeTensorEntry parse_entry(const fs::path& file, const std::string& name,
                            const nlohmann::json& value, std::size_t data_start,
                            std::size_t data_size) {
  if (!value.is_object()) fail(file, name, "header entry is not an object: " + value.dump());
  auto dtype_it = value.find("dtype");
  auto shape_it = value.find("shape");
  auto offsets_it = value.find("data_offsets");
  if (dtype_it == value.end() || !dtype_it->is_string()) fail(file, name, "missing string 'dtype'");
  if (shape_it == value.end() || !shape_it->is_array()) fail(file, name, "missing array 'shape'");
  if (offsets_it == value.end() || !offsets_it->is_array() || offsets_it->size() != 2)
    fail(file, name, "'data_offsets' must be an array [begin, end]");

  SafeTensorEntry e;
  e.name = name;
  e.file = file;
  e.dtype_name = dtype_it->get<std::string>();
  const DTypeInfo* info = find_dtype(e.dtype_name);
  if (!info) fail(file, name, "unknown dtype '" + e.dtype_name + "'");
  e.dtype = info->dtype;

  std::uint64_t elements = 1;
  for (const auto& d : *shape_it) {
    std::uint64_t n = json_u64(d, file, name, "'shape'");
    if (n != 0 && elements > (std::uint64_t{1} << 62) / n)
      fail(file, name, "shape " + shape_it->dump() + " is too large");
    elements *= n;
    e.shape.push_back(static_cast<std::int64_t>(n));
  }
  std::uint64_t begin = json_u64((*offsets_it)[0], file, name, "'data_offsets'");
  std::uint64_t end = json_u64((*offsets_it)[1], file, name, "'data_offsets'");
  if (begin > end)
    fail(file, name,
         "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
             "] end before they begin");
  if (end > data_size)
    fail(file, name,
         "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
             "] run past the end of the data area (" + std::to_string(data_size) + " bytes)");
  if (elements * info->size != end - begin)
    fail(file, name,
         "shape " + to_string(e.shape) + " of " + e.dtype_name + " needs " +
             std::to_string(elements * info->size) + " bytes but data_offsets span " +
             std::to_string(end - begin));
  e.offset = data_start + begin;
  e.size = end - begin;
  return e;
}

// Spans of tensors of one file must not share bytes.
void check_overlaps(const fs::path& file, std::vector<const SafeTensorEntry*> spans) {
  std::erase_if(spans, [](const SafeTensorEntry* e) { return e->size == 0; });
  std::sort(spans.begin(), spans.end(),
            [](const auto* a, const auto* b) { return a->offset < b->offset; });
  for (std::size_t i = 1; i < spans.size(); ++i)
    if (spans[i]->offset < spans[i - 1]->offset + spans[i - 1]->size)
      fail(file, spans[i]->name, "data overlaps tensor '" + spans[i - 1]->name + "'");
}

}  // namespace

void SafeTensors::Impl::add_file(const fs::path& file, bool first) {
  auto mapping = std::make_shared<const Mapping>(file);
  const std::size_t size = mapping->size();
  if (size < 8)
    fail(file, "file is " + std::to_string(size) +
                   " bytes, shorter than the 8-byte header length of a safetensors file");
  const std::uint64_t header_len = read_u64_le(mapping->data());
  if (header_len > size - 8)
    fail(file, "header length " + std::to_string(header_len) + " runs past the end of the file (" +
                   std::to_string(size) + " bytes)");
  const char* header_text = reinterpret_cast<const char*>(mapping->data() + 8);
  nlohmann::json header;
  try {
    header = parse_json_bounded<nlohmann::json>(header_text, header_text + header_len);
  } catch (const nlohmann::json::exception& e) {
    fail(file, std::string("invalid JSON header: ") + e.what());
  } catch (const JsonTooDeep& e) {
    fail(file, std::string("invalid JSON header: ") + e.what());
  }
  if (!header.is_object()) fail(file, "the JSON header is not an object");

  const std::size_t data_start = 8 + header_len;
  const std::size_t data_size = size - data_start;
  std::vector<const SafeTensorEntry*> spans;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) fail(file, "__metadata__ is not an object");
      for (const auto& [key, v] : value.items()) {
        if (!v.is_string()) fail(file, "__metadata__ value '" + key + "' is not a string");
        if (first) metadata[key] = v.get<std::string>();
      }
      continue;
    }
    SafeTensorEntry e = parse_entry(file, name, value, data_start, data_size);
    if (entries.count(name))
      fail(file, name, "also stored in " + entries.find(name)->second.file.string());
    spans.push_back(&entries.emplace(name, std::move(e)).first->second);
  }
  check_overlaps(file, std::move(spans));
  mappings.emplace(file, std::move(mapping));
}

void SafeTensors::Impl::add_index(const fs::path& index) {
  std::ifstream in(index, std::ios::binary);
  if (!in) fail(index, "cannot open");
  nlohmann::json doc;
  try {
    doc = parse_json_bounded<nlohmann::json>(in);
  } catch (const nlohmann::json::exception& e) {
    fail(index, std::string("invalid JSON: ") + e.what());
  } catch (const JsonTooDeep& e) {
    fail(index, std::string("invalid JSON: ") + e.what());
  }
  auto map_it = doc.is_object() ? doc.find("weight_map") : doc.end();
  if (map_it == doc.end() || !map_it->is_object()) fail(index, "missing object 'weight_map'");

  std::map<std::string, std::vector<std::string>> shards;  // shard file -> tensors
  for (const auto& [tensor, shard] : map_it->items()) {
    if (!shard.is_string()) fail(index, tensor, "weight_map value is not a file name");
    shards[shard.get<std::string>()].push_back(tensor);
  }
  bool first = true;
  for (const auto& [shard, tensors] : shards) {
    const fs::path file = index.parent_path() / shard;
    if (!fs::is_regular_file(file))
      fail(index, tensors.front(), "weight_map names missing shard '" + shard + "'");
    add_file(file, first);
    first = false;
    for (const auto& tensor : tensors) {
      auto it = entries.find(tensor);
      if (it == entries.end() || it->second.file != file)
        fail(index, tensor, "weight_map says shard '" + shard + "' but it is not there");
    }
  }
}

const SafeTensorEntry& SafeTensors::Impl::entry(std::string_view name) const {
  auto it = entries.find(name);
  if (it == entries.end())
    throw ConfigError(listing.string() + ": no tensor '" + std::string(name) + "'");
  return it->second;
}

SafeTensors SafeTensors::open(const fs::path& path) {
  auto impl = std::make_shared<Impl>();
  impl->path = impl->listing = path;
  if (fs::is_directory(path)) {
    if (fs::is_regular_file(path / "model.safetensors.index.json")) {
      impl->listing = path / "model.safetensors.index.json";
      impl->add_index(impl->listing);
    } else if (fs::is_regular_file(path / "model.safetensors")) {
      impl->listing = path / "model.safetensors";
      impl->add_file(impl->listing, true);
    } else {
      fail(path, "no model.safetensors or model.safetensors.index.json in this folder");
    }
  } else if (!fs::exists(path)) {
    fail(path, "no such file or folder");
  } else if (path.extension() == ".json") {
    impl->add_index(path);
  } else {
    impl->add_file(path, true);
  }
  SafeTensors st;
  st.impl_ = std::move(impl);
  return st;
}

SafeTensors SafeTensors::held(std::map<std::string, Tensor> tensors, fs::path label) {
  auto impl = std::make_shared<Impl>();
  impl->path = impl->listing = std::move(label);
  for (auto& [name, tensor] : tensors) {
    SafeTensorEntry e{.name = name,
                      .dtype_name = to_string(tensor.dtype()),
                      .dtype = tensor.dtype(),
                      .shape = tensor.shape(),
                      .file = impl->path,
                      .size = tensor.bytes()};
    impl->entries.emplace(name, std::move(e));
    impl->held.emplace(name, std::move(tensor));
  }
  SafeTensors st;
  st.impl_ = std::move(impl);
  return st;
}

namespace {
template <typename Impl>
const Impl& need(const std::shared_ptr<const Impl>& impl) {
  if (!impl) throw RuntimeError("SafeTensors used before open()");
  return *impl;
}
}  // namespace

const fs::path& SafeTensors::path() const {
  return need(impl_).path;
}
bool SafeTensors::contains(std::string_view name) const {
  return impl_ && impl_->entries.find(name) != impl_->entries.end();
}
std::size_t SafeTensors::size() const {
  return impl_ ? impl_->entries.size() : 0;
}

std::vector<std::string> SafeTensors::names() const {
  std::vector<std::string> out;
  if (impl_)
    for (const auto& [name, e] : impl_->entries) out.push_back(name);
  return out;
}

const SafeTensorEntry& SafeTensors::entry(std::string_view name) const {
  return need(impl_).entry(name);
}

const std::map<std::string, std::string>& SafeTensors::metadata() const {
  return need(impl_).metadata;
}

Tensor SafeTensors::get(std::string_view name) const {
  const auto& impl = need(impl_);
  const SafeTensorEntry& e = impl.entry(name);
  if (const auto it = impl.held.find(name); it != impl.held.end()) return it->second;
  if (!e.dtype)
    fail(e.file, e.name,
         "dtype " + e.dtype_name + " is not one masque can load (F32, F16, BF16, I32, I8, U8)");
  const auto& mapping = impl.mappings.at(e.file);
  auto* data = const_cast<std::uint8_t*>(mapping->data() + e.offset);
  std::shared_ptr<void> keepalive(mapping, const_cast<std::uint8_t*>(mapping->data()));
  Tensor view = Tensor::view(data, e.shape, *e.dtype, std::move(keepalive));
  // An element-misaligned span (legal in the format) is copied rather than viewed.
  if (reinterpret_cast<std::uintptr_t>(data) % dtype_size(*e.dtype) != 0) {
    Tensor copy(e.shape, *e.dtype);
    if (e.size) std::memcpy(copy.raw(), data, e.size);
    return copy;
  }
  return view;
}

namespace {

// The index of the first 16-bit float whose exponent bits are all set (a NaN or an infinity:
// `exponent` is 0x7f80 for BF16, 0x7c00 for F16), or n.
std::size_t first_non_finite_16(const std::uint16_t* values, std::size_t n,
                                std::uint16_t exponent) {
  constexpr std::size_t kBlock = 4096;
  for (std::size_t begin = 0; begin < n; begin += kBlock) {
    const std::size_t end = std::min(n, begin + kBlock);
    std::uint32_t bad = 0;
    for (std::size_t i = begin; i < end; ++i)
      bad |= static_cast<std::uint32_t>((values[i] & exponent) == exponent);
    if (bad)
      for (std::size_t i = begin; i < end; ++i)
        if ((values[i] & exponent) == exponent) return i;
  }
  return n;
}

// The index of the first NaN or infinity in `values`, or values.size(). By the exponent bits,
// so that the scan vectorizes (a checkpoint is read through once at load).
std::size_t first_non_finite(std::span<const float> values) {
  constexpr std::size_t kBlock = 4096;
  for (std::size_t begin = 0; begin < values.size(); begin += kBlock) {
    const std::size_t end = std::min(values.size(), begin + kBlock);
    std::uint32_t bad = 0;
    for (std::size_t i = begin; i < end; ++i) {
      std::uint32_t bits;
      std::memcpy(&bits, &values[i], sizeof bits);
      bad |= static_cast<std::uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
    }
    if (bad)
      for (std::size_t i = begin; i < end; ++i)
        if (!std::isfinite(values[i])) return i;
  }
  return values.size();
}

}  // namespace

Tensor SafeTensors::get_f32(std::string_view name) const {
  Tensor t = get(name);
  const SafeTensorEntry& e = entry(name);
  if (!is_floating(t.dtype()))
    fail(e.file, e.name,
         "is " + std::string(to_string(t.dtype())) + ", expected a floating-point tensor");
  if (t.dtype() != DType::f32) t = t.to_f32();
  // One NaN or infinity in a weight turns every result into NaN: refuse it here, by name.
  const std::span<const float> values(t.f32(), static_cast<std::size_t>(t.numel()));
  if (const std::size_t i = first_non_finite(values); i < values.size())
    fail(e.file, e.name,
         "holds " + std::string(std::isnan(values[i]) ? "NaN" : "an infinity") + " at element " +
             std::to_string(i) + " (a weight must be a finite number)");
  return t;
}

Tensor SafeTensors::get_float(std::string_view name, const Shape& expected) const {
  const SafeTensorEntry& e = entry(name);
  if (e.shape != expected)
    fail(e.file, e.name, "has shape " + to_string(e.shape) + ", expected " + to_string(expected));
  Tensor t = get(name);
  if (!is_floating(t.dtype()))
    fail(e.file, e.name,
         "is " + std::string(to_string(t.dtype())) + ", expected a floating-point tensor");
  const auto n = static_cast<std::size_t>(t.numel());
  const std::size_t size = dtype_size(t.dtype());
  // Checked a chunk at a time, each chunk's pages dropped once checked: a large weight is
  // never resident whole only for this check (its user reads it again, in order).
  constexpr std::size_t kChunkBytes = std::size_t{16} << 20;
  const std::size_t chunk = kChunkBytes / size;
  std::size_t bad = n;
  bool nan = false;
  for (std::size_t begin = 0; begin < n && bad == n; begin += chunk) {
    const std::size_t count = std::min(chunk, n - begin);
    if (t.dtype() == DType::f32) {
      const std::span<const float> values(t.f32() + begin, count);
      const std::size_t i = first_non_finite(values);
      if (i < count) bad = begin + i, nan = std::isnan(values[i]);
    } else {
      const auto* v = static_cast<const std::uint16_t*>(t.raw()) + begin;
      const std::uint16_t exponent = t.dtype() == DType::bf16 ? 0x7f80 : 0x7c00;
      const std::uint16_t mantissa = t.dtype() == DType::bf16 ? 0x007f : 0x03ff;
      const std::size_t i = first_non_finite_16(v, count, exponent);
      if (i < count) bad = begin + i, nan = (v[i] & mantissa) != 0;
    }
    if (bad == n && n * size > 2 * kChunkBytes) release(name, (begin + count) * size);
  }
  if (bad < n)
    fail(e.file, e.name,
         "holds " + std::string(nan ? "NaN" : "an infinity") + " at element " +
             std::to_string(bad) + " (a weight must be a finite number)");
  return t;
}

void SafeTensors::release(std::string_view name) const {
  release(name, std::numeric_limits<std::size_t>::max());
}

namespace {

// madvise over the whole pages inside a mapped tensor's first `bytes` (a neighbour sharing a
// page is not touched); nothing for tensors held in memory. Advice: it may fail.
template <typename Impl>
void advise_pages(const Impl& impl, std::string_view name, std::size_t bytes, int advice) {
  if (impl.held.count(std::string(name))) return;
  const SafeTensorEntry& e = impl.entry(name);
  const auto it = impl.mappings.find(e.file);
  if (it == impl.mappings.end() || e.size == 0) return;
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const auto base = reinterpret_cast<std::uintptr_t>(it->second->data());
  const std::uintptr_t begin = (base + e.offset + page - 1) / page * page;
  const std::uintptr_t end = (base + e.offset + std::min(e.size, bytes)) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, advice);
}

}  // namespace

void SafeTensors::release(std::string_view name, std::size_t leading_bytes) const {
  advise_pages(need(impl_), name, leading_bytes, MADV_DONTNEED);
}

void SafeTensors::read_rows_at_random(std::string_view name) const {
  advise_pages(need(impl_), name, std::numeric_limits<std::size_t>::max(), MADV_RANDOM);
}

Tensor SafeTensors::get_f32(std::string_view name, const Shape& expected) const {
  const SafeTensorEntry& e = entry(name);
  if (e.shape != expected)
    fail(e.file, e.name, "has shape " + to_string(e.shape) + ", expected " + to_string(expected));
  return get_f32(name);
}

}  // namespace masque

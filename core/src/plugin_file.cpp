#include "plugin_file.hpp"

#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace masque {

namespace {

bool fits(std::string_view bytes, std::uint64_t offset, std::uint64_t size) {
  return offset <= bytes.size() && size <= bytes.size() - offset;
}

template <class T>
T read_at(std::string_view bytes, std::uint64_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof value);
  return value;
}

// A string table Boost.DLL indexes into: not empty and ending with NUL.
bool terminated(std::string_view bytes, const Elf64_Shdr& table) {
  return table.sh_size > 0 && bytes[table.sh_offset + table.sh_size - 1] == '\0';
}

std::string header_problem(std::string_view bytes, const Elf64_Ehdr& h) {
  if (std::memcmp(h.e_ident, ELFMAG, SELFMAG) != 0) return "no ELF magic number";
  if (h.e_ident[EI_CLASS] != ELFCLASS64 || h.e_ident[EI_DATA] != ELFDATA2LSB)
    return "not a 64-bit little-endian ELF file";
  if (h.e_type != ET_DYN) return "not a shared object";
  if (h.e_shentsize != sizeof(Elf64_Shdr)) return "unexpected section header size";
  if (h.e_shnum == 0 || h.e_shstrndx >= h.e_shnum) return "no section name table";
  if (!fits(bytes, h.e_shoff, std::uint64_t{h.e_shnum} * sizeof(Elf64_Shdr)))
    return "the section headers run past the end of the file";
  return "";
}

}  // namespace

std::string elf_problem(std::string_view bytes) {
  if (bytes.size() < sizeof(Elf64_Ehdr)) return "shorter than an ELF header";
  const auto h = read_at<Elf64_Ehdr>(bytes, 0);
  if (std::string problem = header_problem(bytes, h); !problem.empty()) return problem;
  std::vector<Elf64_Shdr> sections(h.e_shnum);
  for (std::size_t i = 0; i < sections.size(); ++i) {
    const Elf64_Shdr& s = sections[i] =
        read_at<Elf64_Shdr>(bytes, h.e_shoff + i * sizeof(Elf64_Shdr));
    if (s.sh_type != SHT_NOBITS && !fits(bytes, s.sh_offset, s.sh_size))
      return "section " + std::to_string(i) + " runs past the end of the file";
    if (s.sh_type == SHT_STRTAB && !terminated(bytes, s))
      return "string table " + std::to_string(i) + " is empty or not NUL-terminated";
  }
  const Elf64_Shdr& names = sections[h.e_shstrndx];
  if (names.sh_type == SHT_NOBITS || !terminated(bytes, names))
    return "the section name table is empty or not NUL-terminated";
  for (const Elf64_Shdr& s : sections)
    if (s.sh_name >= names.sh_size) return "a section name lies outside the section name table";
  return "";
}

std::string elf_file_problem(const std::filesystem::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::string("cannot open: ") + std::strerror(errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(Elf64_Ehdr))) {
    ::close(fd);
    return "shorter than an ELF header";
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return std::string("cannot map: ") + std::strerror(errno);
  std::string problem = elf_problem(std::string_view(static_cast<const char*>(p), size));
  ::munmap(p, size);
  return problem;
}

}  // namespace masque

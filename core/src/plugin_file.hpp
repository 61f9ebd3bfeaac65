// Plugin files are checked before Boost.DLL reads their section names. Its ELF reader trusts the
// offsets, sizes and name indexes in the file: a truncated or damaged library in a plugin
// directory would make it read out of bounds, or allocate whatever size the file claims.
// (Its symbol reader is not used at all: Boost 1.74 reads symbol names from the last string
// table in the file, which is usually .shstrtab, not .strtab.)
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace masque {

// "" when `bytes` are a 64-bit little-endian ELF shared object whose section headers and
// sections lie inside it, with its string tables NUL-terminated and every section name index
// inside the section name table; else what is wrong, for a message.
std::string elf_problem(std::string_view bytes);
// The same for a file (mapped, not read whole).
std::string elf_file_problem(const std::filesystem::path& file);

}  // namespace masque

// Fuzz target: files in a plugin directory. The registry's ELF check (plugin_file.hpp) either
// names what is wrong, or the file goes on to Boost.DLL's section-name reader (all the registry
// uses before loading), which must then read it without faults: the check is what keeps a
// damaged library from crashing the host.
#include <boost/dll/library_info.hpp>

#include "fuzz_support.hpp"
#include "plugin_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes = masque::fuzz::as_text(data, size);
  const std::string problem = masque::elf_problem(bytes);
  const std::filesystem::path file = masque::fuzz::scratch_dir() / "libmasque-tokenizer-x.so";
  masque::fuzz::write_bytes(file, bytes);
  MASQUE_FUZZ_CHECK(masque::elf_file_problem(file) == problem);
  if (!problem.empty()) return 0;
  try {
    boost::dll::library_info info(file.string());
    (void)info.sections();
  } catch (const std::exception&) {
    // Boost may still refuse the file (a read past the end): refused is fine, a fault is not.
  }
  return 0;
}

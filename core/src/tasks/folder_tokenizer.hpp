#pragma once
// Whether a pipeline's tokenizer agrees with the one its model folder carries.

#include <optional>
#include <string>

#include "masque/tokenizer.hpp"
#include "pipeline.hpp"
#include "registry.hpp"

namespace masque {

// When the model section's folder holds its own tokenizer files for `section` ("tokenizer" or
// "target_tokenizer") and the pipeline reads `tokenizer` from elsewhere, compares the two
// vocabularies piece by piece; returns what differs (a warning's text), or nothing when they
// agree, the pipeline reads the folder's own files, or there is nothing to compare.
std::optional<std::string> folder_tokenizer_mismatch(const Pipeline& pipeline,
                                                     const Registry& registry,
                                                     const std::string& section,
                                                     const Tokenizer& tokenizer);

}  // namespace masque

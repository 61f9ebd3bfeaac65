// Pipelines built from a model folder as it is (`masque run --task T --model DIR`,
// `masque inspect DIR`): the model plugin is the one whose descriptor says it serves the
// folder's config.json (masque/folder_match.hpp), the tokenizer follows the files present
// (tokenizer_files.hpp: what the tokenizer plugins declare), the mask is the task's default and the decoder takes the
// folder's generation_config.json. The result is pipeline YAML, loaded like any pipeline file,
// so --dump-config prints a file that runs unchanged.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "pipeline.hpp"
#include "registry.hpp"

namespace masque {

// What identifies a folder's architecture in its config.json, for messages and `masque inspect`.
struct FolderArchitecture {
  std::string model_type;                  // "" when absent
  std::vector<std::string> architectures;  // `architectures`, or the single `architecture`
  std::string text() const;                // "model_type 'llama', architectures LlamaForCausalLM"
};
FolderArchitecture read_architecture(const std::filesystem::path& dir);

// The folders a model plugin serves (its MASQUE_FOLDER_MATCH text), or nullptr.
const char* folder_match(const PluginEntry& entry);

// The one model plugin serving the folder. ConfigError naming the folder, what its config.json
// says and every model plugin with the folders it serves, when none or several match.
const PluginEntry& model_plugin_for(const std::filesystem::path& dir, const Registry& registry);

struct FolderRequest {
  std::string task;
  std::filesystem::path model_dir;
  std::filesystem::path tokenizer_dir;  // empty: the model folder
  bool tokenizer_given = false;         // --set tokenizer.plugin=...: not from the files
};

// The pipeline YAML for the request (absolute paths). ConfigError when the task is unknown,
// the folder has no config.json, no or several model plugins serve it, or the task needs a
// tokenizer and the folder has none of the files that name one.
std::string folder_pipeline_yaml(const FolderRequest& request, const Registry& registry,
                                 const std::vector<TaskSpec>& tasks);

}  // namespace masque

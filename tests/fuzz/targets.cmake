# The fuzz targets, shared by two builds:
#   tests/fuzz/CMakeLists.txt (MASQUE_FUZZ=ON, clang): libFuzzer executables fuzz_NAME;
#   tests/hardening/CMakeLists.txt (every build): replayers fuzz_replay_NAME that CTest runs
#   over corpus/NAME once, so the seeds and the inputs of past findings stay fixed.
set(MASQUE_FUZZ_TARGETS safetensors config_json pipeline tokenizers records plugin_file
                        tokenizer_json grammar)
set(MASQUE_FUZZ_DIR "${CMAKE_CURRENT_LIST_DIR}")

# masque_add_fuzz_target(NAME LIBFUZZER|REPLAY): the executable's name.
function(masque_add_fuzz_target NAME MODE OUT)
  get_filename_component(shared_dir "${PROJECT_SOURCE_DIR}/../shared" ABSOLUTE)
  if(MODE STREQUAL "LIBFUZZER")
    set(target fuzz_${NAME})
    add_executable(${target} ${MASQUE_FUZZ_DIR}/${NAME}_fuzz.cpp ${MASQUE_FUZZ_DIR}/fuzz_support.cpp)
    target_link_options(${target} PRIVATE -fsanitize=fuzzer)
  else()
    set(target fuzz_replay_${NAME})
    add_executable(${target} ${MASQUE_FUZZ_DIR}/${NAME}_fuzz.cpp ${MASQUE_FUZZ_DIR}/fuzz_support.cpp
                             ${MASQUE_FUZZ_DIR}/replay_main.cpp)
  endif()
  target_include_directories(${target} PRIVATE ${MASQUE_FUZZ_DIR})
  target_link_libraries(${target} PRIVATE masque masque_internal Boost::filesystem)
  target_compile_definitions(${target} PRIVATE
    MASQUE_BUILD_PLUGIN_DIR="${MASQUE_BUILD_PLUGIN_DIR}"
    MASQUE_SHARED_DIR="${shared_dir}")
  set(${OUT} ${target} PARENT_SCOPE)
endfunction()

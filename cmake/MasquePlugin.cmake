# masque_add_plugin(NAME KIND SOURCES ...)
#
# Builds a masque plugin: a MODULE library with hidden visibility, linked to libmasque, put
# in the plugin directory of the build (and installed there). Used in-tree and, through the
# installed CMake package, by out-of-tree plugins (examples/custom-plugin).
function(masque_add_plugin NAME KIND)
  cmake_parse_arguments(ARG "" "OUTPUT_DIRECTORY" "SOURCES;LIBRARIES" ${ARGN})
  set(sources ${ARG_SOURCES} ${ARG_UNPARSED_ARGUMENTS})
  set(kinds tokenizer mask model decoder)
  if(NOT KIND IN_LIST kinds)
    message(FATAL_ERROR "masque_add_plugin(${NAME}): KIND must be one of ${kinds}, not '${KIND}'")
  endif()
  set(target "masque_${KIND}_${NAME}")
  string(REPLACE "-" "_" target "${target}")
  add_library(${target} MODULE ${sources})
  if(TARGET masque::masque)
    target_link_libraries(${target} PRIVATE masque::masque ${ARG_LIBRARIES})
  else()
    target_link_libraries(${target} PRIVATE masque ${ARG_LIBRARIES})
  endif()
  set_target_properties(${target} PROPERTIES
    PREFIX "libmasque-"
    OUTPUT_NAME "${KIND}-${NAME}"
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  if(ARG_OUTPUT_DIRECTORY)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${ARG_OUTPUT_DIRECTORY}")
  elseif(DEFINED MASQUE_BUILD_PLUGIN_DIR)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${MASQUE_BUILD_PLUGIN_DIR}")
  endif()
  if(DEFINED MASQUE_PLUGIN_INSTALL_DIR)
    install(TARGETS ${target} LIBRARY DESTINATION "${MASQUE_PLUGIN_INSTALL_DIR}")
  elseif(DEFINED MASQUE_PLUGIN_SUBDIR)
    install(TARGETS ${target} LIBRARY DESTINATION "${MASQUE_PLUGIN_SUBDIR}")
  endif()
  set(MASQUE_LAST_PLUGIN_TARGET ${target} PARENT_SCOPE)
endfunction()

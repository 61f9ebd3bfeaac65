# masque_add_plugin(NAME KIND SOURCES src... [LIBRARIES lib...]
#                   [OUTPUT_DIRECTORY dir] [INSTALL_DESTINATION dir] [NO_INSTALL])
#
# Builds a masque plugin: a MODULE library named libmasque-KIND-NAME.so (the name the plugin
# host lists and reports problems by), compiled as C++20 with hidden visibility and linked to
# libmasque. KIND is tokenizer, mask, model or decoder; NAME should be the descriptor's name.
#
# Used in the masque tree (plugins/) and, through the installed CMake package
# (find_package(masque)), by plugin projects outside it (examples/custom-plugin).
#
# Where the library is built:
#   OUTPUT_DIRECTORY if given; in the masque tree, the build's plugin directory (where the
#   masque binary of the build looks); outside, CMAKE_LIBRARY_OUTPUT_DIRECTORY if set, else the
#   top of the build tree, so that every plugin of a project shares one folder for
#   MASQUE_PLUGIN_PATH.
# Where `cmake --install` puts it:
#   INSTALL_DESTINATION if given; outside the masque tree, MASQUE_PLUGIN_INSTALL_DIR (a cache
#   variable that defaults to the plugin directory of the masque installation found, so the
#   installed masque finds the plugin without any setting); in the masque tree, the plugin
#   directory of the install. NO_INSTALL: not installed. In the masque tree, plugins built
#   into another OUTPUT_DIRECTORY (test fixtures) are not installed either.
#
# Sets MASQUE_LAST_PLUGIN_TARGET in the caller's scope to the target's name
# (masque_KIND_NAME with dashes turned into underscores).
function(masque_add_plugin NAME KIND)
  cmake_parse_arguments(ARG "NO_INSTALL" "OUTPUT_DIRECTORY;INSTALL_DESTINATION"
                        "SOURCES;LIBRARIES" ${ARGN})
  _masque_check_plugin_args("${NAME}" "${KIND}")
  set(target "masque_${KIND}_${NAME}")
  string(REPLACE "-" "_" target "${target}")
  add_library(${target} MODULE ${ARG_SOURCES} ${ARG_UNPARSED_ARGUMENTS})
  target_link_libraries(${target} PRIVATE masque::masque ${ARG_LIBRARIES})
  # The plugin headers use C++20 (std::span, designated initializers). Hidden visibility: the
  # plugin exports only its descriptor, and its internals cannot clash with another plugin's.
  target_compile_features(${target} PRIVATE cxx_std_20)
  set_target_properties(${target} PROPERTIES
    PREFIX "libmasque-"
    OUTPUT_NAME "${KIND}-${NAME}"
    SUFFIX ".so"
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)

  _masque_in_tree(in_tree)
  # MASQUE_NO_PLUGIN_PCH: the test folders of a sanitizer build, whose flags differ from the
  # plugins' (tests/CMakeLists.txt), so that the plugins' header cannot be reused there.
  if(in_tree AND TARGET masque_plugin_pch AND NOT MASQUE_NO_PLUGIN_PCH)
    target_precompile_headers(${target} REUSE_FROM masque_plugin_pch)
  endif()
  if(ARG_OUTPUT_DIRECTORY)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${ARG_OUTPUT_DIRECTORY}")
  elseif(in_tree)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${MASQUE_BUILD_PLUGIN_DIR}")
  elseif(NOT CMAKE_LIBRARY_OUTPUT_DIRECTORY)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}")
  endif()

  if(ARG_INSTALL_DESTINATION)
    install(TARGETS ${target} LIBRARY DESTINATION "${ARG_INSTALL_DESTINATION}")
  elseif(ARG_NO_INSTALL OR (in_tree AND ARG_OUTPUT_DIRECTORY))
    # Not installed.
  elseif(in_tree)
    _masque_install_next_to_libmasque(${target} "${MASQUE_PLUGIN_SUBDIR}")
    # The plugins a build's masque uses (not test fixtures): the `runtime` target builds them.
    set_property(GLOBAL APPEND PROPERTY MASQUE_RUNTIME_PLUGINS ${target})
  else()
    _masque_install_next_to_libmasque(${target} "${MASQUE_PLUGIN_INSTALL_DIR}")
  endif()
  set(MASQUE_LAST_PLUGIN_TARGET ${target} PARENT_SCOPE)
endfunction()

# Fails the configuration early, with the fix, for what the plugin host would reject later.
function(_masque_check_plugin_args NAME KIND)
  set(kinds tokenizer mask model decoder constraint)
  if(NOT KIND IN_LIST kinds)
    message(FATAL_ERROR "masque_add_plugin(${NAME}): KIND must be one of ${kinds}, not '${KIND}'")
  endif()
  if(NOT NAME MATCHES "^[a-z0-9][a-z0-9_-]*$")
    message(FATAL_ERROR "masque_add_plugin(${NAME}): NAME must be lower-case letters, digits, "
                        "'-' and '_' (it is part of the file name libmasque-${KIND}-NAME.so)")
  endif()
  if(NOT TARGET masque::masque)
    message(FATAL_ERROR "masque_add_plugin(${NAME}): no masque::masque target; call "
                        "find_package(masque REQUIRED) first")
  endif()
endfunction()

# True when building inside the masque source tree, where masque::masque is an alias of the
# libmasque target being built rather than an imported one from an installation.
function(_masque_in_tree OUT)
  get_target_property(imported masque::masque IMPORTED)
  if(imported)
    set(${OUT} FALSE PARENT_SCOPE)
  else()
    set(${OUT} TRUE PARENT_SCOPE)
  endif()
endfunction()

# Installs into DESTINATION; when that is the plugin directory of a masque installation
# (lib/masque/plugins), the plugin also finds libmasque two levels up by itself, wherever the
# prefix is moved (the masque binary has it loaded anyway, but `ldd` and other hosts need it).
function(_masque_install_next_to_libmasque target destination)
  if(destination STREQUAL "${MASQUE_PLUGIN_SUBDIR}" OR destination STREQUAL "${MASQUE_PLUGIN_DIR}")
    set_target_properties(${target} PROPERTIES INSTALL_RPATH "$ORIGIN/../..")
  endif()
  install(TARGETS ${target} LIBRARY DESTINATION "${destination}")
endfunction()

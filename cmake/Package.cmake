# The Debian package: `cpack -G DEB` in the build directory (after the build) writes
# masque_VERSION_ARCH.deb with the CLI, libmasque, the plugins, the SDK headers and CMake
# package, the ready pipelines, the man page (generated from --help, cmake/ManPage.cmake), bash
# completion, and the copyright and changelog Debian policy asks for. Its Depends come from
# dpkg-shlibdeps: the Debian runtime libraries masque links. `apt install ./masque_*.deb`
# installs it; /usr/bin/masque finds its plugins in /usr/lib/.../masque/plugins (exe-relative),
# so it runs from any directory.

# The package installs under /usr whatever CMAKE_INSTALL_PREFIX says (a plain `cmake --install`
# keeps its own prefix).
set(MASQUE_DEB_PREFIX /usr)

# The man page and changelog, compressed as Debian policy wants them (gzip -9n: reproducible).
set(MASQUE_MAN_PAGE "${CMAKE_BINARY_DIR}/man/masque.1")
add_custom_command(
  OUTPUT "${MASQUE_MAN_PAGE}.gz"
  COMMAND "${CMAKE_COMMAND}" -E env ASAN_OPTIONS=detect_leaks=0 "${CMAKE_COMMAND}" -DMASQUE=$<TARGET_FILE:masque_cli> -DOUTPUT=${MASQUE_MAN_PAGE}
          -DVERSION=${PROJECT_VERSION}
          -DPLUGIN_DIR=${MASQUE_DEB_PREFIX}/${MASQUE_PLUGIN_SUBDIR}
          -P "${PROJECT_SOURCE_DIR}/cmake/ManPage.cmake"
  COMMAND gzip -9nf "${MASQUE_MAN_PAGE}"
  DEPENDS masque_cli "${PROJECT_SOURCE_DIR}/cmake/ManPage.cmake"
  COMMENT "masque.1 from masque --help"
  VERBATIM)

set(CPACK_PACKAGE_CONTACT "masque maintainers <maintainers@users.noreply.a-seed-a1f2fcdd.example>")
configure_file(cmake/debian/changelog.in "${CMAKE_BINARY_DIR}/debian/changelog" @ONLY)
add_custom_command(
  OUTPUT "${CMAKE_BINARY_DIR}/debian/changelog.gz"
  COMMAND gzip -9nkf "${CMAKE_BINARY_DIR}/debian/changelog"
  DEPENDS "${CMAKE_BINARY_DIR}/debian/changelog"
  VERBATIM)
add_custom_target(masque_package_docs ALL
  DEPENDS "${MASQUE_MAN_PAGE}.gz" "${CMAKE_BINARY_DIR}/debian/changelog.gz")

install(FILES "${MASQUE_MAN_PAGE}.gz" DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(FILES cli/masque.bash-completion DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
        RENAME masque)
install(DIRECTORY pipelines/ DESTINATION ${CMAKE_INSTALL_DATADIR}/masque/pipelines
        FILES_MATCHING PATTERN "*.yaml")
install(FILES cmake/debian/copyright "${CMAKE_BINARY_DIR}/debian/changelog.gz"
        DESTINATION ${CMAKE_INSTALL_DOCDIR})

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME masque)
set(CPACK_PACKAGE_VENDOR "the masque authors")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "run Transformer language models over corpora")
# The extended description (CPack indents it and writes the empty line as " .").
set(CPACK_PACKAGE_DESCRIPTION
    "masque scores, generates, fills and translates text with Transformer models
(GPT-2, Llama, Qwen2, BERT, T5, Marian, encoder-decoders) on oneDNN, from
the shell. Tokenizers, mask strategies, models and decoders are plugins
composed by YAML pipelines, or picked from a Hugging Face model folder.

This package holds the masque command, libmasque, the plugins, the SDK
headers and CMake package for writing plugins, and the ready pipelines.")
set(CPACK_PACKAGING_INSTALL_PREFIX "${MASQUE_DEB_PREFIX}")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # masque_VERSION_ARCH.deb
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# dpkg-shlibdeps must find libmasque in the package itself.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS "${CMAKE_BINARY_DIR}/${CMAKE_INSTALL_LIBDIR}")
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
# libmasque is a public shared library: the ldconfig trigger Debian policy asks for.
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA "${PROJECT_SOURCE_DIR}/cmake/debian/triggers")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_STRIP_FILES ON)
include(CPack)

# Installation (`cmake --install <build> --prefix P`):
#   P/bin/masque                      the CLI (RUNPATH $ORIGIN/../lib: relocatable)
#   P/lib/libmasque.so*               the core library
#   P/lib/masque/plugins/             the built-in plugins (installed by masque_add_plugin),
#                                     found by P/bin/masque through its exe-relative rule
#   P/include/masque/*.hpp            the public headers: the four plugin contracts and the
#                                     core types and numerics they use, abi.hpp generated
#   P/lib/cmake/masque/               the CMake package for plugin authors: masque::masque and
#                                     masque_add_plugin() (examples/custom-plugin)
include(CMakePackageConfigHelpers)

install(TARGETS masque EXPORT masqueTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# Everything in core/include is public; internal headers live in core/src and are not installed.
install(DIRECTORY core/include/masque DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.hpp")
install(FILES "${CMAKE_BINARY_DIR}/core/include/masque/abi.hpp"
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/masque)
install(EXPORT masqueTargets NAMESPACE masque:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/masque)

# The config records what the installation was built with, so that plugin projects use the
# same plugin directory and are warned about a different compiler.
set(MASQUE_BIN_SUBDIR "${CMAKE_INSTALL_BINDIR}")
configure_package_config_file(cmake/masqueConfig.cmake.in
  "${CMAKE_BINARY_DIR}/masqueConfig.cmake"
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/masque
  PATH_VARS MASQUE_PLUGIN_SUBDIR MASQUE_BIN_SUBDIR CMAKE_INSTALL_INCLUDEDIR)
# Plugins check the ABI themselves at load time; the package version only says which releases
# share a plugin ABI major version.
write_basic_package_version_file("${CMAKE_BINARY_DIR}/masqueConfigVersion.cmake"
  COMPATIBILITY SameMajorVersion)
install(FILES
  "${CMAKE_BINARY_DIR}/masqueConfig.cmake"
  "${CMAKE_BINARY_DIR}/masqueConfigVersion.cmake"
  cmake/MasquePlugin.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/masque)

# Installation: binary, libmasque, built-in plugins (installed by masque_add_plugin), public
# headers and the CMake package for plugin authors (examples/custom-plugin).
include(CMakePackageConfigHelpers)

install(TARGETS masque EXPORT masqueTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY core/include/masque DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.hpp")
install(FILES "${CMAKE_BINARY_DIR}/core/include/masque/abi.hpp"
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/masque)
install(EXPORT masqueTargets NAMESPACE masque:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/masque)

configure_package_config_file(cmake/masqueConfig.cmake.in
  "${CMAKE_BINARY_DIR}/masqueConfig.cmake"
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/masque
  PATH_VARS MASQUE_PLUGIN_SUBDIR)
write_basic_package_version_file("${CMAKE_BINARY_DIR}/masqueConfigVersion.cmake"
  COMPATIBILITY SameMajorVersion)
install(FILES
  "${CMAKE_BINARY_DIR}/masqueConfig.cmake"
  "${CMAKE_BINARY_DIR}/masqueConfigVersion.cmake"
  cmake/MasquePlugin.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/masque)

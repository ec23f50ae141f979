# vjit as a package (issue 13): what `cmake --install` puts under the prefix
#   include/vjit/*.h                      the public API, and nothing internal
#   lib/libvjit.a                         every module's object files in one archive
#   lib/libvjit_distributed.a             the communicators of data-parallel training (distributed/)
#   lib/cmake/vjit/vjitConfig.cmake       find_package(vjit): the target vjit::vjit,
#     vjitConfigVersion.cmake             its version check,
#     vjitTargets*.cmake                  and the exported target itself;
#     vjitDistributedTargets*.cmake       vjit::distributed, read only for COMPONENTS distributed
#   lib/pkgconfig/vjit.pc                 vjit::vjit for pkg-config
# vjit::vjit carries include/, C++20 and, as $<LINK_ONLY:...>, the system
# libraries the modules link (VJIT_SYSTEM_LIBRARIES: zlib and Threads as
# imported targets, which vjitConfig.cmake finds again; the GEMM back ends
# found here by path, libdl, ...), so a program links it with nothing else to
# know. No MPI: only vjit::distributed links it.
#
# libvjit.a is made of the module libraries' objects ($<TARGET_OBJECTS>), not
# compiled again: the module libraries stay what the build checks for layering
# and what tests of internals link; inside the build tree the target vjit (and
# its alias vjit::vjit) links them.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

add_library(vjit_library STATIC)
foreach(module IN LISTS VJIT_MODULES)
  target_sources(vjit_library PRIVATE $<TARGET_OBJECTS:vjit_${module}>)
endforeach()
set_target_properties(vjit_library PROPERTIES OUTPUT_NAME vjit EXPORT_NAME vjit)
target_include_directories(vjit_library INTERFACE $<BUILD_INTERFACE:${VJIT_SOURCE_DIR}/include>
                                                  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(vjit_library INTERFACE cxx_std_20)
list(REMOVE_DUPLICATES VJIT_SYSTEM_LIBRARIES)  # keeps the first of each: libxsmm stays before BLIS
target_link_libraries(vjit_library PUBLIC Threads::Threads PRIVATE ${VJIT_SYSTEM_LIBRARIES})

if(NOT VJIT_INSTALL)
  # Only the install rules need the archive.
  set_target_properties(vjit_library PROPERTIES EXCLUDE_FROM_ALL ON)
  return()
endif()

set(vjit_config_dir ${CMAKE_INSTALL_LIBDIR}/cmake/vjit)
install(DIRECTORY ${VJIT_SOURCE_DIR}/include/vjit DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
install(TARGETS vjit_library EXPORT vjitTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT vjitTargets NAMESPACE vjit:: DESTINATION ${vjit_config_dir})
# The optional component `distributed` (find_package(vjit COMPONENTS distributed)):
# libvjit_distributed.a, the target vjit::distributed, which alone links MPI.
install(TARGETS vjit_distributed EXPORT vjitDistributedTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT vjitDistributedTargets NAMESPACE vjit:: DESTINATION ${vjit_config_dir})
configure_package_config_file(${VJIT_SOURCE_DIR}/cmake/vjitConfig.cmake.in ${VJIT_BINARY_DIR}/vjitConfig.cmake
                              INSTALL_DESTINATION ${vjit_config_dir})
# Before 1.0 a minor version may change the API: only the same major.minor matches.
write_basic_package_version_file(${VJIT_BINARY_DIR}/vjitConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${VJIT_BINARY_DIR}/vjitConfig.cmake ${VJIT_BINARY_DIR}/vjitConfigVersion.cmake
        DESTINATION ${vjit_config_dir})

# vjit.pc finds its prefix from where it lies (${pcfiledir}), so the tree may be
# installed anywhere (cmake --install --prefix) or moved after.
file(RELATIVE_PATH vjit_pc_to_prefix /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" vjit_pc_to_prefix "${vjit_pc_to_prefix}")
set(VJIT_PC_PREFIX "\${pcfiledir}/${vjit_pc_to_prefix}")
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(VJIT_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
endif()
set(VJIT_PC_LIBS)
foreach(library IN LISTS VJIT_SYSTEM_LIBRARIES)
  if(TARGET "${library}")  # an imported target (ZLIB::ZLIB): its file
    get_target_property(location ${library} IMPORTED_LOCATION)
    if(NOT location)
      get_target_property(location ${library} IMPORTED_LOCATION_RELEASE)
    endif()
    set(library "${location}")
  endif()
  if(IS_ABSOLUTE "${library}" OR library MATCHES "^-")
    list(APPEND VJIT_PC_LIBS "${library}")
  else()
    list(APPEND VJIT_PC_LIBS "-l${library}")
  endif()
endforeach()
list(APPEND VJIT_PC_LIBS ${CMAKE_THREAD_LIBS_INIT})
list(JOIN VJIT_PC_LIBS " " VJIT_PC_LIBS)
configure_file(${VJIT_SOURCE_DIR}/cmake/vjit.pc.in ${VJIT_BINARY_DIR}/vjit.pc @ONLY)
install(FILES ${VJIT_BINARY_DIR}/vjit.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

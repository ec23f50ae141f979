# vjit as a package: what `cmake --install` puts under the prefix
#   include/vjit/*.h                      the public API, and nothing internal
#   lib/libvjit.a                         every module's object files in one archive
#   lib/libvjit_distributed.a             the communicators of data-parallel training (distributed/)
#   lib/cmake/vjit/vjitConfig.cmake       find_package(vjit): the target vjit::vjit,
#     vjitConfigVersion.cmake             its version check,
#     vjitSystemLibraries.cmake           how it finds the system libraries again,
#     vjitTargets*.cmake                  and the exported target itself;
#     vjitDistributedTargets*.cmake       vjit::distributed, read only for COMPONENTS distributed
#   lib/pkgconfig/vjit.pc                 vjit::vjit for pkg-config
#   lib/pkgconfig/vjit-distributed.pc     vjit::distributed for pkg-config
# vjit::vjit carries include/, C++20 and, as $<LINK_ONLY:...>, the system
# libraries the modules link (VJIT_SYSTEM_LIBRARIES), every one an imported
# target that vjitConfig.cmake makes again on the consumer's machine (zlib and
# Threads by find_dependency; the GEMM back ends, the OpenMP runtime and
# asmjit as vjit_system::<name>, cmake/vjitSystemLibraries.cmake) or a plain
# library name (dl, rt, m): no path of the machine that built it. So a program
# links it with nothing else to know. No MPI: only vjit::distributed links it.
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
              ${VJIT_SOURCE_DIR}/cmake/vjitSystemLibraries.cmake
        DESTINATION ${vjit_config_dir})

# vjit.pc finds its prefix from where it lies (${pcfiledir}), so the tree may be
# installed anywhere (cmake --install --prefix) or moved after.
file(RELATIVE_PATH vjit_pc_to_prefix /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" vjit_pc_to_prefix "${vjit_pc_to_prefix}")
set(VJIT_PC_PREFIX "\${pcfiledir}/${vjit_pc_to_prefix}")
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(VJIT_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
endif()
# Libs: each system library by name, for the linker to find on the consumer's
# machine: -lz, -ldnnl, -l:libxsmm.a (a static library as built), -ldl.
function(vjit_pc_link_flag library out)
  if(library MATCHES "^vjit_system::")
    get_target_property(library ${library} IMPORTED_LOCATION)
  elseif(TARGET "${library}")  # an imported target of a package (ZLIB::ZLIB): its file
    get_target_property(location ${library} IMPORTED_LOCATION)
    if(NOT location)
      get_target_property(location ${library} IMPORTED_LOCATION_RELEASE)
    endif()
    set(library "${location}")
  endif()
  get_filename_component(file "${library}" NAME)
  if(library MATCHES "^-")
    set(flag "${library}")
  elseif(file MATCHES "^lib(.+)\\.so(\\..*)?$")
    set(flag "-l${CMAKE_MATCH_1}")
  elseif(file MATCHES "\\.a$")
    set(flag "-l:${file}")
  else()
    set(flag "-l${library}")
  endif()
  set(${out} "${flag}" PARENT_SCOPE)
endfunction()
set(VJIT_PC_LIBS)
foreach(library IN LISTS VJIT_SYSTEM_LIBRARIES)
  vjit_pc_link_flag("${library}" flag)
  list(APPEND VJIT_PC_LIBS "${flag}")
endforeach()
list(APPEND VJIT_PC_LIBS ${CMAKE_THREAD_LIBS_INIT})
list(JOIN VJIT_PC_LIBS " " VJIT_PC_LIBS)
configure_file(${VJIT_SOURCE_DIR}/cmake/vjit.pc.in ${VJIT_BINARY_DIR}/vjit.pc @ONLY)
install(FILES ${VJIT_BINARY_DIR}/vjit.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# vjit-distributed.pc: the component distributed (libvjit_distributed.a) on
# top of vjit.pc, and, when vjit was built with MPI, MPI's C library as MPI's
# own pkg-config file gives it (ompi-c, mpi-c, mpich, ...): only MPI's C API is
# called (OMPI_SKIP_MPICXX). Without that file (no pkg-config, or an MPI
# without one) vjit-distributed.pc is not made, and the configure log says so.
set(VJIT_PC_DISTRIBUTED_REQUIRES "vjit")
set(vjit_pc_distributed ON)
if(VJIT_HAVE_MPI)
  find_package(PkgConfig QUIET)
  set(vjit_pc_mpi "")
  if(PKG_CONFIG_FOUND)
    foreach(module ompi-c mpi-c mpich ompi mpi)
      pkg_check_modules(VJIT_PC_MPI_${module} QUIET ${module})
      if(VJIT_PC_MPI_${module}_FOUND)
        set(vjit_pc_mpi ${module})
        break()
      endif()
    endforeach()
  endif()
  if(vjit_pc_mpi)
    string(APPEND VJIT_PC_DISTRIBUTED_REQUIRES " ${vjit_pc_mpi}")
  else()
    set(vjit_pc_distributed OFF)
    message(STATUS "vjit-distributed.pc not made: no pkg-config file of MPI found (ompi-c, mpi-c, mpich, ompi, mpi)")
  endif()
endif()
if(vjit_pc_distributed)
  configure_file(${VJIT_SOURCE_DIR}/cmake/vjit-distributed.pc.in ${VJIT_BINARY_DIR}/vjit-distributed.pc @ONLY)
  install(FILES ${VJIT_BINARY_DIR}/vjit-distributed.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()

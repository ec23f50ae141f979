# The system libraries libvjit.a calls (oneDNN, the OpenMP runtime, BLIS,
# libxsmm, asmjit) as imported targets vjit_system::<name>, found on the
# machine that links them. The build makes each one from the file it found
# (CMakeLists.txt, vjit_link_system) and records the file's name; the installed
# package (vjitConfig.cmake) finds a file of that name again on the consumer's
# machine, so that vjitTargets.cmake names only targets, never a path of the
# machine that built vjit. Static or shared stays as built: libxsmm.a is found
# as libxsmm.a, libdnnl.so as libdnnl.so.

# vjit_system_library(<name> <file name> [<path>]): makes the imported target
# vjit_system::<name> for the library at <path> or, without one, for the file
# find_library finds by <file name> in the usual places and in the C++
# compiler's own library directories (where GCC keeps libgomp.so). Sets
# vjit_system_<name>_FOUND in the caller's scope.
function(vjit_system_library name file)
  set(path "${ARGV2}")
  if(NOT TARGET vjit_system::${name})
    if(NOT path)
      find_library(VJIT_SYSTEM_${name}_LIBRARY NAMES ${file} HINTS ${CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES})
      set(path "${VJIT_SYSTEM_${name}_LIBRARY}")
    endif()
    if(NOT path)
      set(vjit_system_${name}_FOUND FALSE PARENT_SCOPE)
      return()
    endif()
    add_library(vjit_system::${name} UNKNOWN IMPORTED)
    set_target_properties(vjit_system::${name} PROPERTIES IMPORTED_LOCATION "${path}")
  endif()
  set(vjit_system_${name}_FOUND TRUE PARENT_SCOPE)
endfunction()

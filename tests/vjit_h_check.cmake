# Fails unless include/vjit/vjit.h includes every other header of include/vjit,
# so `#include <vjit/vjit.h>` is the whole public API.
#   cmake -DINCLUDE_DIR=<source>/include -P tests/vjit_h_check.cmake
file(READ ${INCLUDE_DIR}/vjit/vjit.h umbrella)
file(GLOB headers RELATIVE ${INCLUDE_DIR} ${INCLUDE_DIR}/vjit/*.h)
list(SORT headers)
set(missing)
foreach(header IN LISTS headers)
  if(NOT header STREQUAL "vjit/vjit.h" AND NOT umbrella MATCHES "#include [\"<]${header}[\">]")
    list(APPEND missing ${header})
  endif()
endforeach()
list(LENGTH headers count)
if(missing)
  list(JOIN missing ", " missing)
  message(FATAL_ERROR "vjit/vjit.h does not include: ${missing}")
endif()
message(STATUS "vjit/vjit.h includes every public header (${count} headers in include/vjit)")

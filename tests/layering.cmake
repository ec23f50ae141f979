# The layering of DESIGN.md ("Dependencies point one way"), tested; the top
# CMakeLists.txt sets it up.
#
# layering.include.<consumer>.<folder>: compiles `#include "<folder>/<x>.h"`
#   (the folder's first header) with the include path <consumer> is built
#   with. It compiles when <consumer> may use <folder>; otherwise the test
#   passes only when the compiler reports that header not found. Consumers:
#   every module library, the examples' trainer (what the examples see) and
#   vjit-bench (what the benchmark drivers see: the public API, and jit/ for
#   the engine's internal counters). A module may include its own
#   folder and those it depends on (VJIT_VISIBLE_<module>): models, written
#   against the public API, none but its own.
# layering.public_header.<name>: every public header compiles with include/
#   alone, so the public API includes nothing internal.
# layering.vjit_h_includes_every_public_header: vjit/vjit.h includes each
#   header of include/vjit (tests/vjit_h_check.cmake).
# layering.links: scripts/check_layering.sh on the module libraries, as the
#   build runs it; layering.links_detects: the same script with ir left out
#   of what jit may use must fail, naming jit, ir and a function.
# layering.public_headers: scripts/check_public_headers.sh, every module's
#   includes of include/vjit/ against the folder each public header belongs
#   to (the folder that implements it); layering.public_headers_detects: with
#   scheduler left out of what jit may use it must fail, naming a header.
set(probe_dir ${CMAKE_CURRENT_BINARY_DIR}/layering)
set(compile ${CMAKE_CXX_COMPILER} ${CMAKE_CXX20_STANDARD_COMPILE_OPTION} -fsyntax-only)

foreach(folder IN LISTS VJIT_MODULES)
  file(GLOB headers RELATIVE ${VJIT_SOURCE_DIR} CONFIGURE_DEPENDS ${VJIT_SOURCE_DIR}/${folder}/*.h)
  list(SORT headers)
  list(GET headers 0 probe_header_${folder})
  file(CONFIGURE OUTPUT ${probe_dir}/${folder}.cpp CONTENT "#include \"${probe_header_${folder}}\"\n")
endforeach()

# layering_probes(<consumer> <target> [<folder it may use>...])
function(layering_probes consumer target)
  foreach(folder IN LISTS VJIT_MODULES)
    set(test layering.include.${consumer}.${folder})
    add_test(NAME ${test}
             COMMAND ${compile} "-I$<JOIN:$<TARGET_PROPERTY:${target},INCLUDE_DIRECTORIES>,;-I>" ${probe_dir}/${folder}.cpp
             COMMAND_EXPAND_LISTS)
    if(NOT folder IN_LIST ARGN)
      string(REPLACE "." "\\." header_regex "${probe_header_${folder}}")
      set_tests_properties(${test} PROPERTIES PASS_REGULAR_EXPRESSION "${header_regex}.*(No such file|not found)")
    endif()
  endforeach()
endfunction()

foreach(module IN LISTS VJIT_MODULES)
  layering_probes(${module} vjit_${module} ${module} ${VJIT_VISIBLE_${module}})
endforeach()
if(TARGET vjit_trainer)
  layering_probes(examples vjit_trainer)
endif()
if(TARGET vjit_bench)
  layering_probes(perf vjit_bench jit)  # jit/engine_access.h: the engine's internal counters
endif()

file(GLOB public_headers CONFIGURE_DEPENDS ${VJIT_SOURCE_DIR}/include/vjit/*.h)
foreach(header IN LISTS public_headers)
  get_filename_component(name ${header} NAME_WE)
  file(CONFIGURE OUTPUT ${probe_dir}/public_${name}.cpp CONTENT "#include \"vjit/${name}.h\"\n")
  add_test(NAME layering.public_header.${name}
           COMMAND ${compile} -Wall -Wextra -Wpedantic -Werror -Wno-unused-parameter -I${VJIT_SOURCE_DIR}/include
                   ${probe_dir}/public_${name}.cpp)
endforeach()

add_test(NAME layering.vjit_h_includes_every_public_header
         COMMAND ${CMAKE_COMMAND} -DINCLUDE_DIR=${VJIT_SOURCE_DIR}/include -P ${CMAKE_CURRENT_SOURCE_DIR}/vjit_h_check.cmake)

add_test(NAME layering.links COMMAND bash ${VJIT_SOURCE_DIR}/scripts/check_layering.sh ${CMAKE_NM}
                                     ${VJIT_LAYERING_SPECS})
add_test(NAME layering.links_detects
         COMMAND bash ${VJIT_SOURCE_DIR}/scripts/check_layering.sh ${CMAKE_NM}
                 "ir=$<TARGET_FILE:vjit_ir>=" "jit=$<TARGET_FILE:vjit_jit>=runtime,codegen,scheduler")
set_tests_properties(layering.links_detects PROPERTIES PASS_REGULAR_EXPRESSION "jit may not depend on ir[^\n]*\n  vjit::")

add_test(NAME layering.public_headers
         COMMAND bash ${VJIT_SOURCE_DIR}/scripts/check_public_headers.sh ${VJIT_SOURCE_DIR} ${VJIT_PUBLIC_HEADER_SPECS})
add_test(NAME layering.public_headers_detects
         COMMAND bash ${VJIT_SOURCE_DIR}/scripts/check_public_headers.sh ${VJIT_SOURCE_DIR} "jit=runtime,codegen,ir,io")
set_tests_properties(layering.public_headers_detects PROPERTIES
                     PASS_REGULAR_EXPRESSION "jit may not depend on scheduler[^\n]* includes vjit/[a-z_]+[.]h")

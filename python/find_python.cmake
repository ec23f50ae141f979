# Whether the Python module (python/) is built: Python 3 with its development
# files, pybind11 and Doxygen, which reads the docstrings out of the public
# headers (Debian: python3-dev, pybind11-dev, doxygen). Sets VJIT_HAVE_PYTHON
# and, when it is OFF, VJIT_PYTHON_MISSING (the reason, which the python.*
# tests print when they skip). Included before the libraries are defined: the
# module links them into a shared object, so they are compiled as
# position-independent code when it is built.
set(VJIT_HAVE_PYTHON OFF)
set(VJIT_PYTHON_MISSING "")
if(NOT VJIT_PYTHON)
  set(VJIT_PYTHON_MISSING "the Python module is not built here (VJIT_PYTHON=OFF)")
  return()
endif()
# The interpreter: the one scikit-build-core (pip install .) or the user names;
# else Debian's /usr/bin/python3 when it imports numpy (the one whose python3-*
# packages scripts/install-deps.sh installs; a pyenv or venv first on PATH may
# lack them); else the first CMake finds.
if(NOT Python3_EXECUTABLE AND NOT Python_EXECUTABLE AND EXISTS /usr/bin/python3)
  execute_process(COMMAND /usr/bin/python3 -c "import numpy" RESULT_VARIABLE vjit_no_numpy OUTPUT_QUIET ERROR_QUIET)
  if(vjit_no_numpy EQUAL 0)
    set(Python3_EXECUTABLE /usr/bin/python3)
  endif()
elseif(NOT Python3_EXECUTABLE AND Python_EXECUTABLE)
  set(Python3_EXECUTABLE ${Python_EXECUTABLE})
endif()
# pip install . (scikit-build-core) builds nothing but the module: there a
# missing piece is an error, elsewhere the reason the python.* tests skip.
find_package(Python3 COMPONENTS Interpreter Development.Module)
if(NOT Python3_Development.Module_FOUND)
  set(VJIT_PYTHON_MISSING "Python 3's development files were not found (Debian: python3-dev)")
endif()
if(VJIT_PYTHON_MISSING STREQUAL "")
  find_package(pybind11 2.10 CONFIG QUIET)
  if(NOT pybind11_FOUND)
    set(VJIT_PYTHON_MISSING "pybind11 was not found (Debian: pybind11-dev; scripts/install-deps.sh installs it)")
  endif()
endif()
if(VJIT_PYTHON_MISSING STREQUAL "")
  find_package(Doxygen QUIET)
  if(NOT DOXYGEN_FOUND)
    set(VJIT_PYTHON_MISSING "doxygen was not found (Debian: doxygen; scripts/install-deps.sh installs it): the "
                            "module's docstrings are made from the C++ headers' comments by it (python/cpp_docs.py)")
  endif()
endif()
if(NOT VJIT_PYTHON_MISSING STREQUAL "")
  if(SKBUILD)
    message(FATAL_ERROR "${VJIT_PYTHON_MISSING}")
  endif()
  return()
endif()
set(VJIT_HAVE_PYTHON ON)
# Read by perf/python_vs_cpp.sh: the interpreter that imports the built module.
set(VJIT_PYTHON_EXECUTABLE ${Python3_EXECUTABLE} CACHE INTERNAL "the interpreter the Python module is built for")
message(STATUS "vjit Python module for ${Python3_EXECUTABLE} (pybind11 ${pybind11_VERSION})")

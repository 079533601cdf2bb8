# Fails unless the executable FILE loads the shared library LIB instead of
# carrying a copy of it. The tests load Lance's (a copy in every test
# executable filled CI's disk) and kv0's (a copy in each made every change to
# src/ relink them all); docs/building.md has both. Run as:
#   cmake -DREADELF=... -DFILE=... -DLIB=libname.so -P CheckLoads.cmake
execute_process(
  COMMAND ${READELF} --dynamic ${FILE}
  OUTPUT_VARIABLE dynamic
  RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "readelf failed on ${FILE} (${status})")
endif()
string(REPLACE "." "\\." lib_pattern "${LIB}")
if(NOT dynamic MATCHES "\\(NEEDED\\)[^\n]*\\[${lib_pattern}\\]")
  message(FATAL_ERROR "${FILE} does not load ${LIB}; it carries a static copy")
endif()
message(STATUS "${FILE} loads ${LIB}")

# Fails unless the executable FILE loads Lance as the shared library
# liblance_c.so instead of carrying a copy of it (docs/building.md: a copy in
# every test executable filled CI's disk). Run as:
#   cmake -DREADELF=... -DFILE=... -P CheckSharedLance.cmake
execute_process(
  COMMAND ${READELF} --dynamic ${FILE}
  OUTPUT_VARIABLE dynamic
  RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "readelf failed on ${FILE} (${status})")
endif()
if(NOT dynamic MATCHES "\\(NEEDED\\)[^\n]*\\[liblance_c\\.so\\]")
  message(FATAL_ERROR "${FILE} does not load liblance_c.so; it links Lance statically")
endif()
message(STATUS "${FILE} loads liblance_c.so")

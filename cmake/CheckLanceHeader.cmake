# Regenerates the lance-c header and fails if it differs from the committed
# one. Run as: cmake -DCBINDGEN=... -DCRATE=... -DOUT=... -P CheckLanceHeader.cmake
execute_process(
  COMMAND ${CBINDGEN} --quiet --config ${CRATE}/cbindgen.toml --output ${OUT} ${CRATE}
  RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "cbindgen failed (${status})")
endif()
execute_process(
  COMMAND ${CMAKE_COMMAND} -E compare_files ${OUT} ${CRATE}/include/lance_c.h
  RESULT_VARIABLE differs)
if(differs)
  message(FATAL_ERROR "rust/lance-c/include/lance_c.h is out of step with the crate; "
                      "regenerate it with tools/gen-lance-header")
endif()
message(STATUS "lance_c.h matches the crate's exports")

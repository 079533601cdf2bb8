# Builds the lance-c Rust crate with cargo and exposes it twice: the shared
# library `lance_c`, which the tests and tools link, and the static library
# `lance_c_static`, which the Python extension links so that the installed
# package carries Lance inside itself.
#
# Why both: Lance is most of every executable that contains it (the static
# library is about 780 MB). Linked into each of about 35 test executables, in
# three build directories (plain, ASan, TSan), it filled CI's disk; linked
# once as a shared library, each test is a few megabytes and relinks in a
# fraction of the time.
#
# Cargo's target directory lives outside the checkout by default, so a fresh
# clone (CI's, say) reuses the compiled Lance instead of rebuilding it.

find_program(CARGO cargo HINTS "$ENV{HOME}/.cargo/bin" REQUIRED)

if(DEFINED ENV{KV0_CARGO_TARGET_DIR})
  set(_kv0_default_target "$ENV{KV0_CARGO_TARGET_DIR}")
elseif(DEFINED ENV{CARGO_TARGET_DIR})
  set(_kv0_default_target "$ENV{CARGO_TARGET_DIR}")
else()
  set(_kv0_default_target "$ENV{HOME}/.cache/kv0/cargo-target")
endif()
set(KV0_CARGO_TARGET_DIR "${_kv0_default_target}" CACHE PATH "cargo target directory for lance-c")
set(KV0_CARGO_PROFILE "release" CACHE STRING "cargo profile for lance-c")

set(_lance_c_dir "${KV0_CARGO_TARGET_DIR}/${KV0_CARGO_PROFILE}")
set(LANCE_C_LIBRARY "${_lance_c_dir}/liblance_c.so")
set(LANCE_C_STATIC_LIBRARY "${_lance_c_dir}/liblance_c.a")
set(LANCE_C_INCLUDE_DIR "${PROJECT_SOURCE_DIR}/rust/lance-c/include")

# Always ask cargo: it decides in about a second whether anything changed.
#
# Cargo rebuilds a crate whose build script saw different compiler variables
# (CC, CFLAGS, CMAKE_GENERATOR, ...), and with it everything above it, which
# is most of Lance. pip's build sets some of them and a shell does not, so the
# variables are pinned here: every build, from any caller, looks the same.
#
# Nothing compiles against the crate but its committed header, so only links
# wait for cargo: the library file is the custom target's byproduct, and a
# link that needs it makes Ninja run cargo first, while the C++ objects
# compile beside it (the last minutes of a cold cargo build use one core).
add_custom_target(lance_c_cargo ALL
  COMMAND ${CMAKE_COMMAND} -E env
          --unset=CFLAGS --unset=CXXFLAGS --unset=CPPFLAGS --unset=LDFLAGS --unset=RUSTFLAGS
          CC=gcc CXX=g++ CMAKE_GENERATOR=Ninja CARGO_TARGET_DIR=${KV0_CARGO_TARGET_DIR}
          ${CARGO} build --locked --profile ${KV0_CARGO_PROFILE}
          --manifest-path ${PROJECT_SOURCE_DIR}/rust/lance-c/Cargo.toml
  BYPRODUCTS ${LANCE_C_LIBRARY} ${LANCE_C_STATIC_LIBRARY}
  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/rust/lance-c
  COMMENT "cargo build lance-c (${KV0_CARGO_PROFILE})"
  USES_TERMINAL)

# The crate's build script names the shared library liblance_c.so (its
# SONAME); executables find it through their build-tree RPATH.
add_library(lance_c SHARED IMPORTED GLOBAL)
set_target_properties(lance_c PROPERTIES
  IMPORTED_LOCATION ${LANCE_C_LIBRARY}
  IMPORTED_SONAME liblance_c.so
  INTERFACE_INCLUDE_DIRECTORIES ${LANCE_C_INCLUDE_DIR})
add_library(lance_c_static STATIC IMPORTED GLOBAL)
set_target_properties(lance_c_static PROPERTIES
  IMPORTED_LOCATION ${LANCE_C_STATIC_LIBRARY}
  INTERFACE_INCLUDE_DIRECTORIES ${LANCE_C_INCLUDE_DIR})
# No add_dependencies(lance_c lance_c_cargo): that would hold every object
# file of every target linking lance_c until cargo is done.
find_package(Threads REQUIRED)
# What `cargo rustc -- --print native-static-libs` lists for this crate.
target_link_libraries(lance_c_static INTERFACE Threads::Threads dl m rt)

# The Rust text library (rust/text: Hugging Face tokenizers + minijinja behind a C ABI) as the
# imported static library trainer::text_rust.
#
# By default cargo builds it (offline after `cargo fetch --locked`, which tools/setup runs) into
# the CMake build folder. On a machine without a crate registry, build the library elsewhere and
# point TRAINER_TEXT_LIB at the resulting libtrainer_text.a instead.
include_guard(GLOBAL)

set(TRAINER_TEXT_LIB "" CACHE FILEPATH
    "Prebuilt libtrainer_text.a of rust/text (empty: build it with cargo)")
set(TRAINER_CARGO_JOBS "2" CACHE STRING "Parallel jobs of the cargo build of rust/text")

set(_rust_dir "${PROJECT_SOURCE_DIR}/rust/text")

if(TRAINER_TEXT_LIB)
  if(NOT EXISTS "${TRAINER_TEXT_LIB}")
    message(FATAL_ERROR "TRAINER_TEXT_LIB=${TRAINER_TEXT_LIB} does not exist")
  endif()
  set(_text_lib "${TRAINER_TEXT_LIB}")
  add_custom_target(trainer_text_rust_build)
else()
  find_program(TRAINER_CARGO cargo HINTS "$ENV{HOME}/.cargo/bin" REQUIRED)
  set(_target_dir "${CMAKE_BINARY_DIR}/rust-target")
  set(_text_lib "${_target_dir}/release/libtrainer_text.a")
  file(GLOB_RECURSE _rust_sources CONFIGURE_DEPENDS "${_rust_dir}/src/*.rs")
  add_custom_command(
    OUTPUT "${_text_lib}"
    COMMAND "${TRAINER_CARGO}" build --release --locked -j ${TRAINER_CARGO_JOBS}
            --manifest-path "${_rust_dir}/Cargo.toml" --target-dir "${_target_dir}"
    DEPENDS ${_rust_sources} "${_rust_dir}/Cargo.toml" "${_rust_dir}/Cargo.lock"
    WORKING_DIRECTORY "${_rust_dir}"
    COMMENT "cargo build rust/text (tokenizers, minijinja)"
    USES_TERMINAL
    VERBATIM)
  add_custom_target(trainer_text_rust_build DEPENDS "${_text_lib}")
endif()

add_library(trainer_text_rust STATIC IMPORTED GLOBAL)
set_target_properties(trainer_text_rust PROPERTIES IMPORTED_LOCATION "${_text_lib}")
target_include_directories(trainer_text_rust INTERFACE "${_rust_dir}")
# The Rust standard library needs these from the C runtime.
target_link_libraries(trainer_text_rust INTERFACE Threads::Threads ${CMAKE_DL_LIBS} m)
add_dependencies(trainer_text_rust trainer_text_rust_build)
add_library(trainer::text_rust ALIAS trainer_text_rust)

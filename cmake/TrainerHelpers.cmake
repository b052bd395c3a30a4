# One helper per target kind, so every target gets the same flags.

set(TRAINER_WARNINGS -Wall -Wextra -Wno-unused-parameter)

function(trainer_apply_flags target)
  target_compile_options(${target} PRIVATE ${TRAINER_WARNINGS})
  if(TRAINER_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

# trainer_library(NAME SOURCES ... DEPS ...)
# A part of the system: its public header sits in src/<part>/, included as "<part>/x.h".
function(trainer_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  trainer_apply_flags(${name})
endfunction()

# trainer_executable(NAME SOURCES ... DEPS ...)
function(trainer_executable name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  trainer_apply_flags(${name})
endfunction()

# trainer_gtest(NAME SOURCES ... DEPS ...): a GoogleTest binary registered with ctest.
function(trainer_gtest name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  trainer_apply_flags(${name})
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "${ARG_LABELS}")
endfunction()

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

# trainer_gtest(NAME SOURCES ... DEPS ... [ON_STORES]): a GoogleTest binary registered with ctest.
# ON_STORES: some of its suites run on both stores (tests/unit/store/store_databases.h); those named
# "Postgres/..." need the session's PostgreSQL server (the fixture `postgres`, tests/CMakeLists.txt).
function(trainer_gtest name)
  cmake_parse_arguments(ARG "ON_STORES" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  trainer_apply_flags(${name})
  if(ARG_ON_STORES)
    # An empty LABELS value would shift the property pairs after it: it goes last.
    gtest_discover_tests(${name} TEST_FILTER "-Postgres/*" DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "${ARG_LABELS}")
    gtest_discover_tests(${name} TEST_FILTER "Postgres/*" DISCOVERY_TIMEOUT 60
                         PROPERTIES FIXTURES_REQUIRED postgres
                         ENVIRONMENT "TRAINER_TEST_POSTGRES_URL_FILE=${TRAINER_TEST_POSTGRES_STATE}/url"
                         LABELS "${ARG_LABELS}")
  else()
    gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "${ARG_LABELS}")
  endif()
endfunction()

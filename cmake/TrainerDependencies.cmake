# System dependencies, all from Debian bookworm's packages (installed by tools/setup).
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.11 REQUIRED)
find_package(SQLite3 REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(GTest REQUIRED)
# Boost.Beast and Boost.Asio (header-only) for trainerd's HTTP server.
find_package(Boost 1.74 REQUIRED)
include(GoogleTest)

# cpp-httplib ships as a shared library with pkg-config only.
find_package(PkgConfig REQUIRED)
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
add_library(trainer::httplib ALIAS PkgConfig::HTTPLIB)
# libpq (Debian's libpq-dev) for the PostgreSQL store (src/store/postgres_*).
pkg_check_modules(LIBPQ REQUIRED IMPORTED_TARGET libpq)
add_library(trainer::libpq ALIAS PkgConfig::LIBPQ)

// The table the build generates (cmake/EmbedFiles.cmake): each dashboard file's bytes, compiled
// into the binary. Internal to src/ui; assets.h is what the other parts use.
#pragma once

#include <cstddef>
#include <string_view>

namespace trainer::ui::detail {

struct EmbeddedFile {
  std::string_view name;    // the file's name under /ui/ ("app.js")
  std::string_view bytes;   // its content, static storage
  std::string_view sha256;  // hex SHA-256 of the bytes
};

extern const EmbeddedFile kEmbeddedFiles[];
extern const size_t kEmbeddedFileCount;

}  // namespace trainer::ui::detail

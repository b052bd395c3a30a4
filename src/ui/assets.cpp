// find_asset() and index_page() of assets.h over the table the build generates.
#include "ui/assets.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "ui/embedded.h"

namespace trainer::ui {
namespace {

std::string_view content_type_of(std::string_view name) {
  auto ends_with = [&](std::string_view suffix) {
    return name.size() >= suffix.size() && name.substr(name.size() - suffix.size()) == suffix;
  };
  if (ends_with(".html")) return "text/html; charset=utf-8";
  if (ends_with(".js")) return "text/javascript; charset=utf-8";
  if (ends_with(".css")) return "text/css; charset=utf-8";
  return "application/octet-stream";
}

// Built once, on first use; constant afterwards (so safe to read from any thread).
struct Catalog {
  std::vector<std::string> etags;  // owns the quoted tags the assets point at
  std::vector<Asset> assets;

  Catalog() {
    etags.reserve(detail::kEmbeddedFileCount);
    assets.reserve(detail::kEmbeddedFileCount);
    for (size_t i = 0; i < detail::kEmbeddedFileCount; ++i) {
      const detail::EmbeddedFile& f = detail::kEmbeddedFiles[i];
      etags.push_back("\"" + std::string(f.sha256) + "\"");
      assets.push_back(Asset{f.name, content_type_of(f.name), f.bytes, etags.back()});
    }
  }
};

const Catalog& catalog() {
  static const Catalog c;
  return c;
}

}  // namespace

const Asset* find_asset(std::string_view name) {
  for (const Asset& a : catalog().assets) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

const Asset& index_page() {
  const Asset* page = find_asset("index.html");
  // The build embeds index.html always (src/ui/CMakeLists.txt); its absence is a broken build.
  if (page == nullptr) std::abort();
  return *page;
}

}  // namespace trainer::ui

// The web dashboard's files (docs/dashboard.md), compiled into trainerd: our own page, script and
// style (src/ui/) and the chart library uPlot (the pinned npm package), so an installed trainerd
// serves its dashboard with nothing beside it. The routes are src/api/routes_ui.cpp's.
#pragma once

#include <string_view>

namespace trainer::ui {

// One file as served. Every view points into static storage: valid for the program's life.
struct Asset {
  std::string_view name;          // its name under /ui/ ("app.js")
  std::string_view content_type;  // from its extension, with a charset for text
  std::string_view bytes;
  std::string_view etag;          // a strong entity tag: the quoted SHA-256 of the bytes
};

// The file named `name` (no folders), or null when there is none.
const Asset* find_asset(std::string_view name);

// The page every dashboard path answers (index.html): its script reads the path and draws the view.
const Asset& index_page();

}  // namespace trainer::ui

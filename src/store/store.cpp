// What every Store implementation shares: readers built on the interface's own methods.
#include "store/store.h"

#include "common/json_parse.h"

namespace trainer::store {

Result<RunPage> Store::list_runs(const RunFilter& filter) {
  auto rows = list_run_rows(filter);
  if (!rows.is_ok()) return rows.status();
  RunPage page;
  page.total = rows->total;
  page.runs.reserve(rows->rows.size());
  // Parsing outside the implementation's lock lets concurrent readers use every core.
  for (const auto& r : rows->rows) {
    auto doc = parse_json(r.doc, "stored run " + r.id);
    if (!doc.is_ok()) return internal_error(doc.status().message());
    page.runs.push_back(std::move(*doc));
  }
  return page;
}

}  // namespace trainer::store

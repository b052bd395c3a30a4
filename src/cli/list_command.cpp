// The list and show shapes of list_command.h.
#include "cli/list_command.h"

#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"

namespace trainer::cli {

using nlohmann::json;

std::vector<Flag> with_paging(std::vector<Flag> own, const std::string& limit_help, const std::string& offset_help) {
  own.push_back({"limit", 0, "N", limit_help, ""});
  if (!offset_help.empty()) own.push_back({"offset", 0, "N", offset_help, ""});
  return own;
}

int run_list(Context& ctx, const ListView& view) {
  std::string path = view.path;
  int code = kExitOk;
  if (view.paging != Paging::kNone) {
    auto limit = int_flag(ctx, "limit", &code);
    if (code != kExitOk) return code;
    std::optional<long long> offset;
    if (view.paging == Paging::kLimitOffset) {
      offset = int_flag(ctx, "offset", &code);
      if (code != kExitOk) return code;
    }
    if (limit) append_query(&path, "limit", std::to_string(*limit));
    if (offset) append_query(&path, "offset", std::to_string(*offset));
  }
  auto doc = ctx.get(path);
  if (!doc) return ctx.last_failure_code();
  if (!ctx.text()) {
    ctx.print_json(*doc);
    return kExitOk;
  }
  const json items = doc->value(view.items, json::array());
  if (items.empty() && view.empty) {
    out(view.empty(*doc));
    if (!view.more_after_empty) return kExitOk;
  } else {
    std::vector<std::vector<std::string>> rows;
    const double now = now_seconds();
    for (const auto& item : items) rows.push_back(view.row(item, now));
    out(render_table(view.header, rows));
  }
  if (view.more) out(view.more(*doc));
  return kExitOk;
}

int show(Context& ctx, const std::string& path, const std::function<void(const json& doc)>& text) {
  auto doc = ctx.get(path);
  if (!doc) return ctx.last_failure_code();
  if (!ctx.text()) {
    ctx.print_json(*doc);
    return kExitOk;
  }
  text(*doc);
  return kExitOk;
}

int show_document(Context& ctx, const std::string& path) {
  auto doc = ctx.get(path);
  if (!doc) return ctx.last_failure_code();
  ctx.print_document(*doc);
  return kExitOk;
}

std::string more_line(const json& doc, const std::string& command, const std::string& suffix) {
  if (!doc.contains("nextOffset")) return "";
  return "More: " + command + " --offset " + std::to_string(doc["nextOffset"].get<int64_t>()) + suffix + "\n";
}

}  // namespace trainer::cli

// The shapes most read commands share: a list (its paging flags, the query, the fetch, and the
// table or -o json / --jq / --json) and a show (fetch one document, print it as JSON or as the
// command's text view).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/context.h"

namespace trainer::cli {

// Which paging flags a list reads; each one given is appended to the query (limit, then offset).
enum class Paging { kNone, kLimit, kLimitOffset };

// A list's flags: its own, then --limit N and --offset N with its help lines (the ranges
// differ); an empty `offset_help` leaves --offset out (Paging::kLimit).
std::vector<Flag> with_paging(std::vector<Flag> own, const std::string& limit_help, const std::string& offset_help);

// One list command: what it asks for and how its text mode prints the answer.
struct ListView {
  std::string path;                    // "/v1/runs", the command's own filters already in its query
  Paging paging = Paging::kNone;
  std::string items;                   // the answer's array ("runs")
  std::vector<std::string> header;     // the table's columns
  // One table row of an item; `now` is the wall clock (seconds since the epoch) for ages.
  std::function<std::vector<std::string>(const nlohmann::json& item, double now)> row;
  // Printed instead of the table when the list is empty (whole lines); null prints the empty table.
  std::function<std::string(const nlohmann::json& doc)> empty;
  // Printed after the table ("More: ... --offset N\n"); null or "" prints nothing.
  std::function<std::string(const nlohmann::json& doc)> more;
  bool more_after_empty = false;       // whether `more` is printed after the `empty` text too
};

// Runs the list: reads its paging flags (a bad one is a usage error, exit 2), GETs the path,
// and prints the answer. Returns the exit code.
int run_list(Context& ctx, const ListView& view);

// GETs `path` and prints the answer: as JSON when -o json, --jq or --json ask, else `text(doc)`
// prints it. Returns the exit code (a failed call's, printed).
int show(Context& ctx, const std::string& path, const std::function<void(const nlohmann::json& doc)>& text);

// GETs `path` and prints the answer as the -o format asks (text mode: as YAML-like text).
int show_document(Context& ctx, const std::string& path);

// The "More: COMMAND --offset N\n" line of a list answer that has a nextOffset; "" without one.
std::string more_line(const nlohmann::json& doc, const std::string& command, const std::string& suffix = "");

}  // namespace trainer::cli

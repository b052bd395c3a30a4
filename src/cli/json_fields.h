// `--json FIELD,FIELD`: keeps only the named fields of a command's JSON document.
//
// The fields are those of the document's objects: of the document itself, or, for a list, of
// each item; a list comes out as an array of the selected items. A list is an array, or an
// object whose array member is named after the command's noun ({"runs": [...], "nextOffset":
// 50} for `runs list`, "baseModels" for `base-models list`); any other object is one record,
// even when it has array members (a run's phaseHistory).
// Pure functions: the unit tests in tests/unit/cli/ pin them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trainer::cli {

// "runId, phase,workload" -> {"runId", "phase", "workload"}; "" -> {} (list the fields).
// Sets `error` and returns nullopt for an empty name between commas.
std::optional<std::vector<std::string>> parse_field_list(const std::string& text, std::string* error);

// The member names that hold a list's items for a command reached by `path` ({"runs",
// "snapshots"} -> {"snapshots", "runs"}; "base-models" -> "baseModels"), last word first.
std::vector<std::string> list_keys_for(const std::vector<std::string>& path);

// The fields the document offers (for a list, those of any item), in the document's key order.
std::vector<std::string> offered_fields(const nlohmann::json& doc, const std::vector<std::string>& list_keys);

// The document with only `fields` kept (keys printed in the usual sorted order); an item
// without one of them gets null for it. A name no object of the document has is refused: nullopt, and `error` names it
// (with the nearest offered name when one is close) and lists the fields offered.
std::optional<nlohmann::json> select_fields(const nlohmann::json& doc, const std::vector<std::string>& fields,
                                            const std::vector<std::string>& list_keys, std::string* error);

}  // namespace trainer::cli

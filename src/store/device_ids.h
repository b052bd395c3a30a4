// How a claim's device indices are stored (internal to src/store): claims.device_ids holds them
// as text, "0,1" ("" while queued), in both implementations.
#pragma once

#include <string>
#include <vector>

namespace trainer::store {

std::string ids_text(const std::vector<int>& ids);
// The indices of `text`; an item that is not a small non-negative number is skipped.
std::vector<int> ids_of(const std::string& text);

}  // namespace trainer::store

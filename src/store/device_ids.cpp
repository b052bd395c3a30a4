// Claims' device indices as text (declared in store/device_ids.h).
#include "store/device_ids.h"

namespace trainer::store {

std::string ids_text(const std::vector<int>& ids) {
  std::string out;
  for (int id : ids) out += (out.empty() ? "" : ",") + std::to_string(id);
  return out;
}

std::vector<int> ids_of(const std::string& text) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(pos, comma - pos);
    if (!item.empty() && item.find_first_not_of("0123456789") == std::string::npos && item.size() < 7) {
      out.push_back(std::stoi(item));
    }
    pos = comma + 1;
  }
  return out;
}

}  // namespace trainer::store

#include "cli/format.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <ctime>
#include <sstream>

#include "common/utc_time.h"

namespace trainer::cli {
namespace {

constexpr double kMinute = 60.0;
constexpr double kHour = 3600.0;
constexpr double kDay = 86400.0;

bool is_plain_yaml_string(const std::string& s) {
  if (s.empty()) return false;
  static const char* kReserved[] = {"true", "false", "null", "yes", "no", "on", "off", "~"};
  for (const char* r : kReserved) {
    if (s == r) return false;
  }
  const char first = s.front();
  if (std::string_view("-?:,[]{}#&*!|>'\"%@` ").find(first) != std::string_view::npos) return false;
  // A string that reads as a number must stay quoted; "53ffe62f" or a timestamp need not.
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  if (end && *end == '\0') return false;
  if (s.back() == ' ') return false;
  if (s.find(": ") != std::string::npos || s.find(" #") != std::string::npos) return false;
  for (char c : s) {
    if (c == '\n' || c == '\t' || c == '"' || static_cast<unsigned char>(c) < 0x20) return false;
  }
  return true;
}

std::string scalar_text(const nlohmann::json& v) {
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    return is_plain_yaml_string(s) ? s : v.dump();
  }
  return v.dump();
}

}  // namespace

std::optional<double> parse_duration(std::string_view text) {
  if (text.empty()) return std::nullopt;
  if (text == "0") return 0.0;
  size_t i = 0;
  double total = 0;
  bool any = false;
  while (i < text.size()) {
    size_t start = i;
    while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
    if (i == start) return std::nullopt;
    std::string number(text.substr(start, i - start));
    if (number == "." || std::count(number.begin(), number.end(), '.') > 1) return std::nullopt;
    double value = std::strtod(number.c_str(), nullptr);
    size_t unit_start = i;
    while (i < text.size() && std::isalpha(static_cast<unsigned char>(text[i]))) ++i;
    std::string_view unit = text.substr(unit_start, i - unit_start);
    double scale;
    if (unit == "h") scale = kHour;
    else if (unit == "m") scale = kMinute;
    else if (unit == "s") scale = 1.0;
    else if (unit == "ms") scale = 1e-3;
    else if (unit == "us" || unit == "µs") scale = 1e-6;
    else if (unit == "ns") scale = 1e-9;
    else return std::nullopt;
    total += value * scale;
    any = true;
  }
  if (!any) return std::nullopt;
  return total;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  char buf[32];
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(s));
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  } else if (s < 86400) {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>((s % 3600) / 60));
  } else {
    std::snprintf(buf, sizeof buf, "%lldd%02lldh", static_cast<long long>(s / 86400),
                  static_cast<long long>((s % 86400) / 3600));
  }
  return buf;
}

std::string format_gpu_seconds(double gpu_seconds) { return format_device_seconds(gpu_seconds, "GPU"); }

std::string format_device_seconds(double device_seconds, std::string_view device) {
  if (!std::isfinite(device_seconds) || device_seconds < 0) return "?";
  const std::string unit(device);
  char buf[48];
  if (device_seconds < 100) {
    std::snprintf(buf, sizeof buf, "%.0f %s-s", device_seconds, unit.c_str());
  } else if (device_seconds < 100 * kMinute) {
    std::snprintf(buf, sizeof buf, "%.1f %s-min", device_seconds / kMinute, unit.c_str());
  } else {
    std::snprintf(buf, sizeof buf, "%.2f %s-h", device_seconds / kHour, unit.c_str());
  }
  return buf;
}

std::string format_device_time(const nlohmann::json& by_kind) {
  std::string out;
  if (by_kind.is_object()) {
    for (const auto& [kind, seconds] : by_kind.items()) {
      if (!seconds.is_number()) continue;
      out += (out.empty() ? "" : " + ") + format_device_seconds(seconds.get<double>(), kind);
    }
  }
  return out.empty() ? format_device_seconds(0, "device") : out;
}

std::string format_thousands(int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value);
  std::string out;
  int count = 0;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    if (count && count % 3 == 0) out.insert(out.begin(), ',');
    out.insert(out.begin(), *it);
    ++count;
  }
  return value < 0 ? "-" + out : out;
}

std::string format_number(double value) {
  if (!std::isfinite(value)) return std::isnan(value) ? "nan" : (value > 0 ? "inf" : "-inf");
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    return std::fabs(value) >= 10000 ? format_thousands(static_cast<int64_t>(value))
                                     : std::to_string(static_cast<int64_t>(value));
  }
  if (std::fabs(value) >= 10000) return format_thousands(static_cast<int64_t>(std::llround(value)));
  char buf[32];
  if (std::fabs(value) >= 1e-4) {
    std::snprintf(buf, sizeof buf, "%.4g", value);
  } else {
    std::snprintf(buf, sizeof buf, "%.2g", value);
  }
  return buf;
}

size_t display_width(std::string_view s) {
  size_t width = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == 0x1b) {  // skip ANSI escape sequences: ESC [ ... letter
      ++i;
      if (i < s.size() && s[i] == '[') {
        while (i + 1 < s.size() && !std::isalpha(static_cast<unsigned char>(s[i + 1]))) ++i;
        ++i;
      }
      continue;
    }
    if ((c & 0xC0) != 0x80) ++width;
  }
  return width;
}

std::string truncate_to_width(std::string_view s, size_t width) {
  std::string out;
  size_t cells = 0;
  bool escaped = false;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == 0x1b) {  // copy the whole escape sequence: ESC [ ... letter
      size_t j = i + 1;
      if (j < s.size() && s[j] == '[') {
        ++j;
        while (j < s.size() && !std::isalpha(static_cast<unsigned char>(s[j]))) ++j;
        if (j < s.size()) ++j;
      }
      out.append(s.substr(i, j - i));
      escaped = true;
      i = j;
      continue;
    }
    size_t len = 1;
    if ((c & 0xE0) == 0xC0) len = 2;
    else if ((c & 0xF0) == 0xE0) len = 3;
    else if ((c & 0xF8) == 0xF0) len = 4;
    if (cells == width) break;
    out.append(s.substr(i, len));
    ++cells;
    i += len;
  }
  if (escaped && display_width(out) < display_width(s)) out += "\033[0m";
  return out;
}

std::string render_table(const std::vector<std::string>& header,
                         const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths(header.size(), 0);
  for (size_t c = 0; c < header.size(); ++c) widths[c] = display_width(header[c]);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size() && c < widths.size(); ++c) {
      widths[c] = std::max(widths[c], display_width(row[c]));
    }
  }
  std::string out;
  auto emit = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t c = 0; c < widths.size(); ++c) {
      const std::string cell = c < cells.size() ? cells[c] : "";
      line += cell;
      if (c + 1 < widths.size()) line.append(widths[c] - display_width(cell) + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out += '\n';
  };
  emit(header);
  for (const auto& row : rows) emit(row);
  return out;
}

std::string render_fields(const std::vector<std::pair<std::string, std::string>>& fields) {
  size_t width = 0;
  for (const auto& [k, v] : fields) width = std::max(width, display_width(k) + 1);
  std::string out;
  for (const auto& [k, v] : fields) {
    out += k;
    out += ':';
    out.append(width - display_width(k) - 1 + 2, ' ');
    out += v;
    out += '\n';
  }
  return out;
}

std::string render_sections(const std::vector<std::pair<std::string, FieldRows>>& sections, bool color) {
  size_t width = 0;
  for (const auto& [title, rows] : sections) {
    for (const auto& [k, v] : rows) width = std::max(width, display_width(k));
  }
  std::string out;
  for (const auto& [title, rows] : sections) {
    if (rows.empty()) continue;
    out += (color ? "\033[1m" + title + "\033[0m" : title) + "\n";
    for (const auto& [k, v] : rows) {
      out += "  " + k + ":" + std::string(width - display_width(k) + 2, ' ') + v + "\n";
    }
  }
  return out;
}

std::string progress_bar(int64_t done, int64_t total, int width, bool unicode) {
  if (width <= 0) return "";
  double frac = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 0.0;
  frac = std::clamp(frac, 0.0, 1.0);
  std::string out = unicode ? "" : "[";
  if (unicode) {
    static const char* kEighths[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
    const int eighths = static_cast<int>(std::floor(frac * width * 8));
    const int full = eighths / 8;
    const int partial = eighths % 8;
    int cells = 0;
    for (; cells < full; ++cells) out += "█";
    if (partial && cells < width) {
      out += kEighths[partial];
      ++cells;
    }
    for (; cells < width; ++cells) out += "░";
  } else {
    const int full = static_cast<int>(std::floor(frac * width));
    out.append(full, '#');
    out.append(width - full, '.');
    out += ']';
  }
  return out;
}

std::optional<double> estimate_remaining(int64_t done, int64_t total, double elapsed_seconds) {
  if (done <= 0 || total <= 0 || elapsed_seconds <= 0 || !std::isfinite(elapsed_seconds)) {
    return std::nullopt;
  }
  if (done >= total) return 0.0;
  return elapsed_seconds / static_cast<double>(done) * static_cast<double>(total - done);
}

std::string to_yaml_text(const nlohmann::json& doc, int indent) {
  std::string pad(indent, ' ');
  std::string out;
  if (doc.is_object()) {
    if (doc.empty()) return pad + "{}\n";
    for (auto it = doc.begin(); it != doc.end(); ++it) {
      const auto& v = it.value();
      if ((v.is_object() || v.is_array()) && !v.empty()) {
        out += pad + it.key() + ":\n";
        out += to_yaml_text(v, indent + 2);
      } else if (v.is_object()) {
        out += pad + it.key() + ": {}\n";
      } else if (v.is_array()) {
        out += pad + it.key() + ": []\n";
      } else {
        out += pad + it.key() + ": " + scalar_text(v) + "\n";
      }
    }
  } else if (doc.is_array()) {
    if (doc.empty()) return pad + "[]\n";
    for (const auto& v : doc) {
      if ((v.is_object() || v.is_array()) && !v.empty()) {
        std::string nested = to_yaml_text(v, indent + 2);
        // Put the first line of the nested block on the dash line.
        out += pad + "- " + nested.substr(indent + 2);
      } else {
        out += pad + "- " + (v.is_object() ? "{}" : v.is_array() ? "[]" : scalar_text(v)) + "\n";
      }
    }
  } else {
    out += pad + scalar_text(doc) + "\n";
  }
  return out;
}

std::optional<double> parse_rfc3339(std::string_view text) {
  if (auto t = parse_utc_time(text)) return t;
  return parse_utc_time(std::string(text) + "Z");  // a time without an offset is UTC
}

std::optional<double> seconds_between(std::string_view from, std::string_view to) {
  auto a = parse_rfc3339(from);
  auto b = parse_rfc3339(to);
  if (!a || !b) return std::nullopt;
  return *b - *a;
}

}  // namespace trainer::cli

// Pure formatting pieces of the CLI: durations, tables, progress bars, YAML-like rendering.
//
// Nothing here does I/O; everything is a function of its arguments, so the unit tests in
// tests/unit/cli/ pin the exact text users see.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace trainer::cli {

// Parses a Go duration ("90s", "15m0s", "2h", "1h30m", "500ms", "1.5h", "0"). Returns seconds,
// or nullopt when the text is not a duration (a bare number other than 0 needs a unit).
std::optional<double> parse_duration(std::string_view text);

// Renders seconds the way a person reads them: "45s", "3m05s", "2h04m", "3d02h".
// Negative or non-finite input renders as "?".
std::string format_duration(double seconds);

// GPU time in the unit that keeps it short: "0 GPU-s", "42 GPU-s", "12.5 GPU-min", "3.20 GPU-h".
std::string format_gpu_seconds(double gpu_seconds);

// The same for any device: `device` names the unit ("GPU", "CPU"): "42 CPU-s", "3.20 CPU-h".
std::string format_device_seconds(double device_seconds, std::string_view device);

// Device time by kind ({"CPU": 360, "GPU": 12}): "6.0 CPU-min + 12 GPU-s"; "0 device-s" when empty.
std::string format_device_time(const nlohmann::json& by_kind);

// A number shortened for a column: integers as is, others with up to 4 significant digits
// ("1.234", "0.0001", "1.5e-05"), large rates with thousands separators ("12,345").
std::string format_number(double value);
std::string format_thousands(int64_t value);

// A table with a header row, columns left-aligned and separated by two spaces; cells padded
// by their display width (UTF-8 aware). Each row must have as many cells as the header.
std::string render_table(const std::vector<std::string>& header,
                         const std::vector<std::vector<std::string>>& rows);

// "KEY: value" lines with the values aligned after the longest key.
std::string render_fields(const std::vector<std::pair<std::string, std::string>>& fields);

// Titled sections of "Key:  value" rows, values aligned across all sections (as `runs get`
// shows a run); empty sections are left out. `color` makes the titles bold.
using FieldRows = std::vector<std::pair<std::string, std::string>>;
std::string render_sections(const std::vector<std::pair<std::string, FieldRows>>& sections, bool color);

// A bar of `width` cells filled to done/total: "[#######.......]" in ASCII, or with block
// characters when `unicode` ("████▌░░░░"). total <= 0 renders an empty bar.
std::string progress_bar(int64_t done, int64_t total, int width, bool unicode);

// Seconds left when `done` of `total` took `elapsed_seconds`; nullopt when not estimable yet.
std::optional<double> estimate_remaining(int64_t done, int64_t total, double elapsed_seconds);

// The JSON document as indented YAML-like text (keys in document order, scalars as JSON
// writes them, strings unquoted when plain). Used for resolved plans and records in text mode.
std::string to_yaml_text(const nlohmann::json& doc, int indent = 0);

// Display width of a UTF-8 string (one cell per code point; our output has no wide glyphs).
size_t display_width(std::string_view s);

// The first `width` display cells of `s`; ANSI escape sequences are kept whole (and reset at
// the cut), UTF-8 sequences are never split.
std::string truncate_to_width(std::string_view s, size_t width);

// Seconds between two RFC 3339 UTC times ("2026-11-30T05:28:45Z", fractions allowed);
// nullopt when either does not parse.
std::optional<double> seconds_between(std::string_view from, std::string_view to);

// Seconds since the Unix epoch of an RFC 3339 UTC time.
std::optional<double> parse_rfc3339(std::string_view text);

}  // namespace trainer::cli

// UTC times as users and configuration files write them: RFC 3339 / ISO 8601 date-times.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace trainer {

// Seconds since the Unix epoch of `text`, a date-time YYYY-MM-DDTHH:MM:SS[.fraction] followed by
// Z or a ±HH:MM offset (a space may stand for the T); nullopt for anything else, a field out of
// its range (month 13, hour 24, February 30th) included.
std::optional<double> parse_utc_time(std::string_view text);

// `seconds` (since the epoch) as YYYY-MM-DDTHH:MM:SSZ; the fraction, if any, is dropped.
std::string utc_time_text(double seconds);

}  // namespace trainer

// "Did you mean": the valid name nearest to a misspelt one, by edit distance.
//
// Used wherever a person types a name we check against a closed set: plan fields, commands
// and flags of the CLI, names of workloads, datasets and base models. Header-only.
#pragma once

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trainer {

// Optimal-string-alignment distance, case-insensitive: insertions, deletions, substitutions
// and transpositions of neighbours ("strat" -> "start") each cost 1.
inline size_t edit_distance(std::string_view a, std::string_view b) {
  auto lower = [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); };
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1, 0));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) && lower(a[i - 2]) == lower(b[j - 1])) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

// The candidate nearest to `word`, when it is near enough to be a likely typo: within 2 edits,
// or a third of the word's length for long words. Ties go to the earlier candidate; an exact
// match is not a suggestion (nullopt).
inline std::optional<std::string> nearest_name(std::string_view word, const std::vector<std::string>& candidates) {
  const size_t limit = std::max<size_t>(2, word.size() / 3);
  std::optional<std::string> best;
  size_t best_distance = limit + 1;
  for (const auto& c : candidates) {
    if (c == word) return std::nullopt;
    const size_t d = edit_distance(word, c);
    if (d < best_distance && d < word.size()) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

}  // namespace trainer

// The helpers commands.h declares for every command file: input files, confirmation, query
// strings and integer flags.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/format.h"

namespace trainer::cli {

std::optional<std::string> read_input(const std::string& path, std::string* error) {
  if (path == "-") {
    std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    return text;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot read " + path + ": " + std::strerror(errno);
    return std::nullopt;
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

Confirmation confirm(Context& ctx, const std::string& question, bool stdin_consumed) {
  if (ctx.inv.has("force")) return Confirmation::kYes;
  if (!ctx.stdin_tty || stdin_consumed) return Confirmation::kNoTerminal;
  std::fprintf(stderr, "%s [y/N] ", question.c_str());
  std::fflush(stderr);
  std::string answer;
  if (!std::getline(std::cin, answer)) return Confirmation::kNo;
  return (answer == "y" || answer == "Y" || answer == "yes" || answer == "YES") ? Confirmation::kYes
                                                                                : Confirmation::kNo;
}

std::string no_terminal_message(const std::string& command_line) {
  return command_line + " asks for confirmation, but stdin is not a terminal; pass --force to go ahead without asking";
}

void append_query(std::string* path, const std::string& key, const std::string& value) {
  *path += path->find('?') == std::string::npos ? "?" : "&";
  *path += key + "=" + Client::escape(value);
}

std::optional<long long> int_flag(Context& ctx, const std::string& flag, int* exit_code) {
  auto text = ctx.inv.get(flag);
  if (!text) return std::nullopt;
  char* end = nullptr;
  long long v = std::strtoll(text->c_str(), &end, 10);
  if (text->empty() || *end || v < 0) {
    *exit_code = ctx.fail("--" + flag + " must be a non-negative integer, got \"" + *text + "\"", kExitUsage);
    return std::nullopt;
  }
  return v;
}

std::optional<double> timeout_flag(Context& ctx, double fallback, int* exit_code) {
  auto text = ctx.inv.get("timeout");
  if (!text) return fallback;
  auto seconds = parse_duration(*text);
  if (!seconds) {
    *exit_code = ctx.fail("--timeout \"" + *text + "\" is not a duration; write it like 90s, 15m0s or 2h",
                          kExitUsage);
    return std::nullopt;
  }
  return *seconds;
}

}  // namespace trainer::cli

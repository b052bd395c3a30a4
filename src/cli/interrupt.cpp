// The Ctrl-C message of the CLI's watching commands (interrupt.h).
#include "cli/interrupt.h"

#include <algorithm>
#include <cstring>

#include <signal.h>
#include <unistd.h>

#include "cli/exit_codes.h"

namespace trainer::cli {
namespace {

char g_message[512] = "\ntrainer: stopped watching; it carries on\n";
size_t g_length = 0;

void on_interrupt(int) {
  ssize_t ignored = ::write(STDERR_FILENO, g_message, g_length);
  (void)ignored;
  ::_exit(kExitInterrupted);
}

}  // namespace

void explain_interrupt(const std::string& what, const std::string& follow_command, const std::string& stop_command) {
  const std::string text = "\ntrainer: stopped watching " + what + "; it carries on (Ctrl-C stops only the watching): `" +
                           follow_command + "` follows it again, `" + stop_command + "` stops it\n";
  const size_t n = std::min(text.size(), sizeof g_message);
  std::memcpy(g_message, text.data(), n);
  g_length = n;
  ::signal(SIGINT, on_interrupt);
}

}  // namespace trainer::cli

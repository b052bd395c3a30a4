// Ctrl-C while the CLI watches something that carries on without it (a run, an evaluation):
// the watcher says so on stderr, with the commands that follow it again and stop it, and exits 130.
#pragma once

#include <string>

namespace trainer::cli {

// From now on, SIGINT writes "stopped watching WHAT; it carries on (Ctrl-C stops only the
// watching): `FOLLOW` follows it again, `STOP` stops it" to stderr and exits 130. The message is
// composed here, before the handler is installed, so the handler only writes it
// (async-signal-safe). A later call replaces the message.
void explain_interrupt(const std::string& what, const std::string& follow_command, const std::string& stop_command);

}  // namespace trainer::cli

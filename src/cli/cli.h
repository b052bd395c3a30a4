// The trainer command-line tool, over trainerd's HTTP API.
#pragma once

namespace trainer::cli {

// Entry point of the trainer executable; returns the process exit code.
int cli_main(int argc, char** argv);

}  // namespace trainer::cli

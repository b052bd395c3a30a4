#include "cli/cli.h"

int main(int argc, char** argv) { return trainer::cli::cli_main(argc, argv); }

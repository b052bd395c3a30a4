// Exit codes of `trainer`, documented in `trainer --help`.
#pragma once

namespace trainer::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;       // the request failed, or the service said no
inline constexpr int kExitUsage = 2;       // bad command line
inline constexpr int kExitRunFailed = 3;   // --exit-status: the run ended FAILED
inline constexpr int kExitRunCancelled = 4;  // --exit-status: the run ended CANCELLED
inline constexpr int kExitTimeout = 5;     // --timeout passed; the run carries on
inline constexpr int kExitUnreachable = 6; // the service did not answer
inline constexpr int kExitInterrupted = 130;  // Ctrl-C while watching (the shell's 128 + SIGINT)

}  // namespace trainer::cli

// trainer-job: runs an engine on a resolved plan, reports progress and metrics.
#pragma once

namespace trainer::job {

// Entry point of the trainer-job executable; returns the process exit code.
int job_main(int argc, char** argv);

}  // namespace trainer::job

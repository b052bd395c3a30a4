// A run's job asks trainerd's leave to train before it writes anything of its attempt
// (docs/job-protocol.md, "Leave to train"; docs/durability.md, "Replicas"): POST
// CATALOG_URL/v1/jobs/{TRAINER_JOB_ID}/start {"launchFence": TRAINER_LAUNCH_FENCE} with the
// attempt's token. trainerd lets only the job its store recorded for the attempt train, so a job
// started by a replica that had lost the run's lease (stopped between its last lease check and the
// backend's start) exits before it opens the attempt's events file, which the attempt's one job
// writes.
#pragma once

#include <chrono>

#include "common/status.h"
#include "protocol/job_request.h"

namespace trainer::job {

// The exit status of a job that was refused leave to train (EX_TEMPFAIL): it trained nothing and
// wrote no event.
inline constexpr int kExitNotTraining = 75;

struct StartLeaveOptions {
  std::chrono::milliseconds backoff{250};       // first wait after an unanswered ask, doubled after each
  std::chrono::milliseconds max_backoff{2000};  // longest wait between asks
  std::chrono::seconds deadline{600};           // asking stops after this long: refused
  double request_timeout_seconds = 10;          // one ask
};

// ok: train (also when the request carries no launch fence, or no catalog URL, job id and token to
// ask with). failed_precondition: refused, its message trainerd's reason (or that no replica
// answered within the deadline). Asks again, with backoff along the catalog's URLs, while trainerd
// cannot be reached, answers 5xx or 429 (its start not committed yet).
Status ask_leave_to_train(const protocol::JobRequest& request, const StartLeaveOptions& options = {});

}  // namespace trainer::job

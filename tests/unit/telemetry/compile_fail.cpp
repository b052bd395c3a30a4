// Compiled by ctest with one CASE_* defined: every case but CASE_CONTROL must fail to compile
// (see CMakeLists.txt), proving that the generated instruments refuse what the registry does
// not declare.
#include "telemetry/instruments.h"

using namespace trainer::telemetry;

void record(ServiceMetrics& service, JobMetrics& job) {
#if defined(CASE_CONTROL)
  service.pool_claims.set(1, {.claim_state = ClaimState::kGranted, .instance = "i", .pool_accelerator = "any",
                              .pool_serving = false});
  job.sft_step_count.add(1);
#elif defined(CASE_WRONG_METRIC)
  service.pool_claim.set(1, {.claim_state = ClaimState::kGranted, .instance = "i", .pool_accelerator = "any",
                             .pool_serving = false});
#elif defined(CASE_WRONG_KEY)
  service.pool_claims.set(1, {.claim_status = ClaimState::kGranted, .instance = "i", .pool_accelerator = "any",
                              .pool_serving = false});
#elif defined(CASE_WRONG_ENUM)
  service.pool_claims.set(1, {.claim_state = ClaimState::kGrantd, .instance = "i", .pool_accelerator = "any",
                              .pool_serving = false});
#elif defined(CASE_MISSING_ATTRIBUTE)
  service.pool_claims.set(1, {.claim_state = ClaimState::kGranted, .instance = "i", .pool_serving = false});
#elif defined(CASE_STRING_FOR_BOOL)
  service.pool_claims.set(1, {.claim_state = ClaimState::kGranted, .instance = "i", .pool_accelerator = "any",
                              .pool_serving = "false"});
#elif defined(CASE_JOB_METRIC_ON_SERVICE)
  service.sft_step_count.add(1);
#endif
  (void)job;
}

// A job's inputs fetched from the artifact store (docs/job-protocol.md, "Inputs from the artifact
// store"). On a cluster backend with an S3 store, trainerd names the base model and the dataset
// files by s3:// URIs under TRAINER_ARTIFACT_ROOT (protocol/inputs.h). Each is fetched into a
// cache folder on this node, its content hash checked against the one its key names, and moved
// into place only then: a copy in the cache has been verified, and later jobs on the node reuse
// it. The plan is rewritten to the local copies, so the engine reads files as on one host.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "plan/plan.h"
#include "protocol/job_request.h"

namespace trainer::job {

struct InputFetchOptions {
  std::string artifact_root;  // TRAINER_ARTIFACT_ROOT, s3://BUCKET[/PREFIX]; input URIs lie under it
  std::string cache_dir;      // TRAINER_INPUT_CACHE; default $TMPDIR/trainer-inputs ($TMPDIR: /tmp when unset)
};

// From the job request: its artifact root and input cache (TMPDIR's default when it names none).
InputFetchOptions input_fetch_options(const protocol::JobRequest& request);

// Replaces each s3:// input of `plan` (baseModel, config.dataset, config.validationDataset) by
// its verified copy in the cache, fetching what the cache lacks. Fails naming the input: one that
// is not under the artifact root, a store that cannot be reached, a copy whose hash differs.
// Writes one line per input to stderr (fetched or reused, bytes, seconds). Inputs that are not
// s3:// URIs are left as they are.
Status fetch_plan_inputs(plan::Plan& plan, const InputFetchOptions& options);

// The same for any inputs, named by field: each s3:// value is replaced by its verified copy.
Status fetch_inputs(const std::vector<std::pair<std::string, std::string*>>& inputs, const InputFetchOptions& options);

}  // namespace trainer::job

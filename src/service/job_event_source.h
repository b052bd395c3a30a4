// Where the service reads a job's events from (the job protocol, src/protocol/job_protocol.h).
// Every job of every kind (a run's training job, an evaluation's job) is followed through this
// one reader. A job numbers its events 1, 2, ... and posts them to trainerd's API
// (POST /v1/jobs/{jobId}/events, stored by the store's put_job_events()); it also writes them,
// one line each, to its events file, which stays the fallback: a job that posted nothing (an
// older job, one that could not reach trainerd) is read from the file, where line N is event N.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "protocol/job_protocol.h"
#include "store/store.h"

namespace trainer::service {

using json = nlohmann::json;

// One event as the job wrote it: the typed event and its JSON (stored metrics and run events
// keep the job's own fields).
struct JobEventLine {
  protocol::Event event;
  nlohmann::json doc;
};

// Where one job's events are: its attempt's id (its posts; "" = it posts none) and its events file.
struct JobEventSource {
  std::string job_id;
  std::string events_path;
};

// How far a job's events were applied: `seq` events, and where the events file's next line
// starts (-1 once the events came from the store: the file is then only read, from its start,
// for what the job wrote but could not post before it ended).
struct JobEventCursor {
  int64_t seq = 0;
  int64_t offset = 0;
  bool operator==(const JobEventCursor&) const = default;
};

// The events the job wrote after `cursor`, and the cursor after them.
struct JobEventBatch {
  std::vector<JobEventLine> events;
  JobEventCursor cursor;
  bool consumed = false;  // the cursor moved (skipped events move it too)
};

// The job's events past `cursor`: the stored (posted) ones when it posted any, else the
// complete lines of its events file (a partial last line waits for its end; a missing file is no
// events yet). `ended`: the job ended, so the file's lines past what was posted are read too.
// An event this reader does not know (damaged, too long or deep, an unknown type, a bad field)
// is skipped, since a newer job may add events.
Result<JobEventBatch> read_job_events(store::Store& store, const JobEventSource& source, const JobEventCursor& cursor,
                                      bool ended = false);

}  // namespace trainer::service

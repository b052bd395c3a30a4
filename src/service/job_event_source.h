// Where the service reads a job's events from (the job protocol, src/protocol/job_protocol.h).
// Every job of every kind (a run's training job, an evaluation's job) is followed through this
// one reader, so a change of transport (a file shared with the job today) changes it alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include "protocol/job_protocol.h"

namespace trainer::service {

// One event as the job wrote it: the typed event and its line's JSON (stored metrics and run
// events keep the job's own fields).
struct JobEventLine {
  protocol::Event event;
  nlohmann::json doc;
};

// The events the job wrote after `cursor`, and the cursor after them.
struct JobEventBatch {
  std::vector<JobEventLine> events;
  int64_t cursor = 0;
  bool consumed = false;  // the cursor moved (skipped lines move it too)
};

// Reads the complete lines of the events file at `events_path` past byte `cursor`. A partial
// last line waits for its end; a line that is not an event this reader knows (damaged, too long
// or deep, an unknown type, a bad field) is skipped, since a newer job may add events. A missing
// file is no events yet.
JobEventBatch read_job_events(const std::string& events_path, int64_t cursor);

}  // namespace trainer::service

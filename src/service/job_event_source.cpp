// Reading a job's events: see job_event_source.h.
#include "service/job_event_source.h"

#include <fstream>
#include <iterator>

#include "common/json_parse.h"

namespace trainer::service {

JobEventBatch read_job_events(const std::string& events_path, int64_t cursor) {
  JobEventBatch batch;
  batch.cursor = cursor;
  std::ifstream in(events_path, std::ios::binary);
  if (!in) return batch;
  in.seekg(cursor);
  std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t consumed = 0;
  while (true) {
    size_t nl = chunk.find('\n', consumed);
    if (nl == std::string::npos) break;  // a partial last line waits for its end
    std::string_view line(chunk.data() + consumed, nl - consumed);
    consumed = nl + 1;
    if (line.size() > protocol::kMaxEventLineBytes) continue;
    auto doc = parse_json(line, "job event", protocol::kMaxEventDepth);
    if (!doc.is_ok() || !doc->is_object()) continue;
    auto event = protocol::event_from_json(*doc);
    if (!event.is_ok() || !event->has_value()) continue;
    batch.events.push_back({std::move(**event), std::move(*doc)});
  }
  batch.consumed = consumed > 0;
  batch.cursor = cursor + static_cast<int64_t>(consumed);
  return batch;
}

}  // namespace trainer::service

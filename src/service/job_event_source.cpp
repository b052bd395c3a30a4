// Reading a job's events: see job_event_source.h.
#include "service/job_event_source.h"

#include <fstream>
#include <iterator>

#include "common/json_parse.h"

namespace trainer::service {
namespace {

// Stored events read per call: a long job's backlog is applied over several passes.
constexpr int64_t kStoredBatch = 1000;

// Appends the event `text` holds, when it is one this reader knows.
void add_event(std::string_view text, std::vector<JobEventLine>* out) {
  if (text.size() > protocol::kMaxEventLineBytes) return;
  auto doc = parse_json(text, "job event", protocol::kMaxEventDepth);
  if (!doc.is_ok() || !doc->is_object()) return;
  auto event = protocol::event_from_json(*doc);
  if (!event.is_ok() || !event->has_value()) return;
  out->push_back({std::move(**event), std::move(*doc)});
}

// The file's complete lines past `cursor`. With an offset, from there; without (-1), from the
// start, skipping the `cursor.seq` lines already applied.
JobEventBatch read_file(const std::string& path, const JobEventCursor& cursor) {
  JobEventBatch batch;
  batch.cursor = cursor;
  std::ifstream in(path, std::ios::binary);
  if (!in) return batch;
  const bool from_start = cursor.offset < 0;
  in.seekg(from_start ? 0 : cursor.offset);
  std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t consumed = 0;
  int64_t seq = from_start ? 0 : cursor.seq;
  while (true) {
    size_t nl = chunk.find('\n', consumed);
    if (nl == std::string::npos) break;  // a partial last line waits for its end
    std::string_view line(chunk.data() + consumed, nl - consumed);
    consumed = nl + 1;
    if (++seq <= cursor.seq) continue;  // applied already (posted)
    add_event(line, &batch.events);
  }
  if (seq > cursor.seq) {
    batch.consumed = true;
    batch.cursor.seq = seq;
    if (!from_start) batch.cursor.offset = cursor.offset + static_cast<int64_t>(consumed);
  }
  return batch;
}

}  // namespace

Result<JobEventBatch> read_job_events(store::Store& store, const JobEventSource& source, const JobEventCursor& cursor,
                                      bool ended) {
  if (!source.job_id.empty()) {
    auto stored = store.job_events(source.job_id, cursor.seq, kStoredBatch);
    if (!stored.is_ok()) return stored.status();
    if (!stored->empty()) {
      JobEventBatch batch;
      batch.cursor = cursor;
      for (const store::JobItem& item : *stored) {
        if (item.seq != batch.cursor.seq + 1) break;  // the rest waits for the missing one
        add_event(item.text, &batch.events);
        batch.cursor.seq = item.seq;
      }
      batch.consumed = batch.cursor.seq > cursor.seq;
      if (batch.consumed) batch.cursor.offset = -1;  // the store is the job's source from now on
      return batch;
    }
    // Posted before, nothing new: the file only once the job ended (what it could not post).
    if (cursor.offset < 0 && !ended) {
      JobEventBatch none;
      none.cursor = cursor;
      return none;
    }
  }
  return read_file(source.events_path, cursor);
}

}  // namespace trainer::service

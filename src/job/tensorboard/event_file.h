// TensorBoard event files, written by our own code: Event protos (TensorBoard's
// tensorboard/compat/proto event.proto and summary.proto) encoded by hand, framed as records of
// TensorBoard's format, appended to a file named as TensorBoard looks for it. No protobuf
// library: the few messages written here are a handful of fields each (docs/tensorboard.md).
//
// A record: the data's length (uint64, little-endian), the masked CRC-32C of those 8 bytes,
// the data, the masked CRC-32C of the data (job/tensorboard/crc32c.h).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "common/status.h"

namespace trainer::job::tensorboard {

// The file version TensorBoard's reader expects in the first event of a file.
inline constexpr std::string_view kFileVersion = "brain.Event:2";

// `data` framed as one record.
std::string frame_record(std::string_view data);

// One hyperparameter of a run (the HParams plugin shows them as columns).
struct HParam {
  std::string name;                                // "config.hyperparams.optimizer.learningRate"
  std::variant<double, std::string, bool> value;
};

// Encoded Event messages. `wall_time` is seconds since the Unix epoch; `step` the training step.
// The first event of every file.
std::string file_version_event(double wall_time);
// A session (re)start at `step`: TensorBoard's reader drops what an earlier attempt logged at
// `step` and later, so a resumed run that retrains steps shows each step once.
std::string session_start_event(double wall_time, int64_t step);
// Scalars (Summary.Value.simple_value), one value per tag, all at `step`.
std::string scalars_event(double wall_time, int64_t step, const std::vector<std::pair<std::string, double>>& scalars);
// Markdown text for the text plugin: a string tensor with plugin_data plugin_name "text".
std::string text_event(double wall_time, int64_t step, const std::string& tag, const std::string& markdown);
// The run's hyperparameters for the HParams plugin: a SessionStartInfo under the tag
// "_hparams_/session_start_info" (plugin_name "hparams", plugin data version 0).
std::string hparams_event(double wall_time, const std::vector<HParam>& hparams, const std::string& group_name);

// "events.out.tfevents.<seconds>.<host>.<pid>": the name TensorBoard's reader lists.
std::string event_file_name(double wall_time, const std::string& host, int64_t pid);

// An event file being written: records appended and flushed one by one, so that a reader (or
// a copy) sees whole records, and at worst a torn last one, which TensorBoard's reader skips.
// Not thread-safe.
class EventFile {
 public:
  // Creates `dir` when missing and the file `dir/name` (which must not exist), then writes the
  // file-version event.
  static Result<std::unique_ptr<EventFile>> create(const std::string& dir, const std::string& name, double wall_time);
  ~EventFile();
  EventFile(const EventFile&) = delete;
  EventFile& operator=(const EventFile&) = delete;

  // Appends one encoded Event as a record and flushes it to the file.
  Status append(std::string_view event);

  const std::string& path() const { return path_; }
  const std::string& name() const { return name_; }

 private:
  EventFile(std::string path, std::string name, FILE* file) : path_(std::move(path)), name_(std::move(name)), file_(file) {}

  std::string path_;
  std::string name_;
  FILE* file_;  // owned
};

}  // namespace trainer::job::tensorboard

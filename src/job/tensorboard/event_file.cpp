#include "job/tensorboard/event_file.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "job/tensorboard/crc32c.h"

namespace trainer::job::tensorboard {
namespace {

// Protobuf wire types.
constexpr uint32_t kVarint = 0;
constexpr uint32_t kFixed64 = 1;
constexpr uint32_t kLengthDelimited = 2;
constexpr uint32_t kFixed32 = 5;

// Field numbers of the messages written here (TensorBoard's compat/proto and plugin protos).
namespace event {
constexpr uint32_t kWallTime = 1;     // double
constexpr uint32_t kStep = 2;         // int64
constexpr uint32_t kFileVersion = 3;  // string
constexpr uint32_t kSummary = 5;      // Summary
constexpr uint32_t kSessionLog = 7;   // SessionLog
}  // namespace event
namespace session_log {
constexpr uint32_t kStatus = 1;  // enum SessionStatus
constexpr uint64_t kStart = 1;   // SessionStatus.START
}  // namespace session_log
namespace summary {
constexpr uint32_t kValue = 1;  // repeated Value
}  // namespace summary
namespace value {
constexpr uint32_t kTag = 1;          // string
constexpr uint32_t kSimpleValue = 2;  // float
constexpr uint32_t kTensor = 8;       // TensorProto
constexpr uint32_t kMetadata = 9;     // SummaryMetadata
}  // namespace value
namespace metadata {
constexpr uint32_t kPluginData = 1;  // PluginData
constexpr uint32_t kPluginName = 1;  // PluginData.plugin_name
constexpr uint32_t kContent = 2;     // PluginData.content
}  // namespace metadata
namespace tensor {
constexpr uint32_t kDtype = 1;        // DataType
constexpr uint32_t kShape = 2;        // TensorShapeProto
constexpr uint32_t kStringVal = 8;    // repeated bytes
constexpr uint32_t kShapeDim = 2;     // TensorShapeProto.dim
constexpr uint32_t kDimSize = 1;      // Dim.size
constexpr uint64_t kDtFloat = 1;
constexpr uint64_t kDtString = 7;
}  // namespace tensor
namespace hparams {
constexpr uint32_t kSessionStartInfo = 3;  // HParamsPluginData.session_start_info
constexpr uint32_t kHParams = 1;           // SessionStartInfo.hparams: map<string, google.protobuf.Value>
constexpr uint32_t kGroupName = 4;         // SessionStartInfo.group_name
constexpr uint32_t kStartTimeSecs = 5;     // SessionStartInfo.start_time_secs
constexpr uint32_t kMapKey = 1;
constexpr uint32_t kMapValue = 2;
constexpr uint32_t kNumberValue = 2;  // google.protobuf.Value
constexpr uint32_t kStringValue = 3;
constexpr uint32_t kBoolValue = 4;
constexpr const char* kSessionStartTag = "_hparams_/session_start_info";
}  // namespace hparams

// A message being encoded: fields appended in the order written.
class Proto {
 public:
  Proto& varint(uint32_t field, uint64_t v) {
    key(field, kVarint);
    raw_varint(v);
    return *this;
  }
  Proto& float64(uint32_t field, double v) {
    key(field, kFixed64);
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    little_endian(bits, 8);
    return *this;
  }
  Proto& float32(uint32_t field, float v) {
    key(field, kFixed32);
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    little_endian(bits, 4);
    return *this;
  }
  Proto& bytes(uint32_t field, std::string_view v) {
    key(field, kLengthDelimited);
    raw_varint(v.size());
    out_.append(v);
    return *this;
  }
  Proto& message(uint32_t field, const Proto& m) { return bytes(field, m.out_); }
  const std::string& str() const { return out_; }

 private:
  void key(uint32_t field, uint32_t wire_type) { raw_varint((uint64_t{field} << 3) | wire_type); }
  void raw_varint(uint64_t v) {
    while (v >= 0x80) {
      out_ += static_cast<char>((v & 0x7F) | 0x80);
      v >>= 7;
    }
    out_ += static_cast<char>(v);
  }
  void little_endian(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_ += static_cast<char>((v >> (8 * i)) & 0xFF);
  }
  std::string out_;
};

Proto event_at(double wall_time, int64_t step) {
  Proto e;
  e.float64(event::kWallTime, wall_time);
  if (step != 0) e.varint(event::kStep, static_cast<uint64_t>(step));
  return e;
}

Proto plugin_metadata(std::string_view plugin_name, std::string_view content) {
  Proto plugin;
  plugin.bytes(metadata::kPluginName, plugin_name);
  if (!content.empty()) plugin.bytes(metadata::kContent, content);
  return Proto().message(metadata::kPluginData, plugin);
}

std::string summary_event(double wall_time, int64_t step, const Proto& summary) {
  return event_at(wall_time, step).message(event::kSummary, summary).str();
}

}  // namespace

std::string frame_record(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  const uint64_t length = data.size();
  for (int i = 0; i < 8; ++i) out += static_cast<char>((length >> (8 * i)) & 0xFF);
  auto append_u32 = [&out](uint32_t v) {
    for (int i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
  };
  append_u32(masked_crc32c(std::string_view(out.data(), 8)));
  out.append(data);
  append_u32(masked_crc32c(data));
  return out;
}

std::string file_version_event(double wall_time) {
  return event_at(wall_time, 0).bytes(event::kFileVersion, kFileVersion).str();
}

std::string session_start_event(double wall_time, int64_t step) {
  Proto log;
  log.varint(session_log::kStatus, session_log::kStart);
  return event_at(wall_time, step).message(event::kSessionLog, log).str();
}

std::string scalars_event(double wall_time, int64_t step, const std::vector<std::pair<std::string, double>>& scalars) {
  Proto summary;
  for (const auto& [tag, v] : scalars) {
    Proto value;
    value.bytes(value::kTag, tag).float32(value::kSimpleValue, static_cast<float>(v));
    summary.message(summary::kValue, value);
  }
  return summary_event(wall_time, step, summary);
}

std::string text_event(double wall_time, int64_t step, const std::string& tag, const std::string& markdown) {
  Proto t;  // a scalar (rank 0) string tensor
  t.varint(tensor::kDtype, tensor::kDtString).message(tensor::kShape, Proto()).bytes(tensor::kStringVal, markdown);
  Proto value;
  value.bytes(value::kTag, tag).message(value::kMetadata, plugin_metadata("text", "")).message(value::kTensor, t);
  return summary_event(wall_time, step, Proto().message(summary::kValue, value));
}

std::string hparams_event(double wall_time, const std::vector<HParam>& hparams, const std::string& group_name) {
  Proto start;
  for (const auto& h : hparams) {
    Proto v;  // google.protobuf.Value
    if (const auto* d = std::get_if<double>(&h.value)) v.float64(hparams::kNumberValue, *d);
    else if (const auto* s = std::get_if<std::string>(&h.value)) v.bytes(hparams::kStringValue, *s);
    else v.varint(hparams::kBoolValue, std::get<bool>(h.value) ? 1 : 0);
    Proto entry;
    entry.bytes(hparams::kMapKey, h.name).message(hparams::kMapValue, v);
    start.message(hparams::kHParams, entry);
  }
  if (!group_name.empty()) start.bytes(hparams::kGroupName, group_name);
  start.float64(hparams::kStartTimeSecs, wall_time);
  Proto plugin_data;  // HParamsPluginData; its version (field 1) is 0, proto3's default: not written
  plugin_data.message(hparams::kSessionStartInfo, start);
  // The value's tensor: an empty float tensor (shape [0]), as TensorBoard's own summaries write.
  Proto empty_tensor;
  empty_tensor.varint(tensor::kDtype, tensor::kDtFloat)
      .message(tensor::kShape, Proto().message(tensor::kShapeDim, Proto().varint(tensor::kDimSize, 0)));
  Proto value;
  value.bytes(value::kTag, hparams::kSessionStartTag)
      .message(value::kMetadata, plugin_metadata("hparams", plugin_data.str()))
      .message(value::kTensor, empty_tensor);
  return summary_event(wall_time, 0, Proto().message(summary::kValue, value));
}

std::string event_file_name(double wall_time, const std::string& host, int64_t pid) {
  return "events.out.tfevents." + std::to_string(static_cast<int64_t>(std::floor(wall_time))) + "." + host + "." +
         std::to_string(pid);
}

Result<std::unique_ptr<EventFile>> EventFile::create(const std::string& dir, const std::string& name,
                                                     double wall_time) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return internal_error(dir + ": cannot create the TensorBoard folder: " + ec.message());
  const std::string path = (std::filesystem::path(dir) / name).string();
  FILE* f = std::fopen(path.c_str(), "wbx");
  if (f == nullptr) return internal_error(path + ": cannot create the event file: " + std::strerror(errno));
  std::unique_ptr<EventFile> file(new EventFile(path, name, f));
  if (Status st = file->append(file_version_event(wall_time)); !st.is_ok()) return st;
  return file;
}

EventFile::~EventFile() { std::fclose(file_); }

Status EventFile::append(std::string_view event) {
  const std::string record = frame_record(event);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() || std::fflush(file_) != 0) {
    return internal_error(path_ + ": writing an event record failed: " + std::strerror(errno));
  }
  return Status::ok();
}

}  // namespace trainer::job::tensorboard

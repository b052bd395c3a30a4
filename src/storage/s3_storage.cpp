// The S3-compatible implementation of Storage (declared in storage/s3_storage.h).
#include "storage/s3_storage.h"

#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "common/sha256.h"

namespace trainer::storage {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kFolderCommit = ".trainer-folder";
constexpr int64_t kMinPartSize = 5LL << 20;

struct Response {
  long status = 0;             // HTTP status; 0 when the request did not complete
  std::string body;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string transport_error;                 // curl's message when status is 0
};

size_t collect_body(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

size_t collect_header(char* data, size_t size, size_t n, void* out) {
  std::string line(data, size * n);
  const size_t colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    std::string value = line.substr(colon + 1);
    const size_t a = value.find_first_not_of(" \t"), b = value.find_last_not_of(" \t\r\n");
    (*static_cast<std::map<std::string, std::string>*>(out))[name] =
        a == std::string::npos ? "" : value.substr(a, b - a + 1);
  }
  return size * n;
}

// RFC 3986 percent-encoding of a key (unreserved characters and '/' kept) or a query value.
std::string encode(const std::string& s, bool keep_slash) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// The text of every <tag>...</tag> in `xml` (no nesting of the same tag in S3's answers).
std::vector<std::string> xml_all(const std::string& xml, const std::string& tag) {
  std::vector<std::string> out;
  const std::string open = "<" + tag + ">", close = "</" + tag + ">";
  size_t at = 0;
  while ((at = xml.find(open, at)) != std::string::npos) {
    const size_t start = at + open.size(), end = xml.find(close, start);
    if (end == std::string::npos) break;
    out.push_back(xml.substr(start, end - start));
    at = end + close.size();
  }
  return out;
}

std::string xml_first(const std::string& xml, const std::string& tag) {
  auto all = xml_all(xml, tag);
  return all.empty() ? "" : all.front();
}

std::string xml_unescape(std::string s) {
  const std::pair<const char*, const char*> entities[] = {
      {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&apos;", "'"}, {"&amp;", "&"}};
  for (const auto& [from, to] : entities) {
    for (size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += std::strlen(to)) s.replace(at, std::strlen(from), to);
  }
  return s;
}

void curl_init_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

class S3Storage final : public Storage {
 public:
  explicit S3Storage(S3Options o) : o_(std::move(o)) {
    while (!o_.endpoint.empty() && o_.endpoint.back() == '/') o_.endpoint.pop_back();
    while (!o_.prefix.empty() && o_.prefix.back() == '/') o_.prefix.pop_back();
  }

  // Creates the bucket when missing; a refusal (wrong key) fails here, naming it.
  Status connect() {
    Response head = call("HEAD", "", "", {}, nullptr);
    if (head.status == 200) return Status::ok();
    if (head.status == 404) {
      Response made = call("PUT", "", "", {}, nullptr);
      if (made.status == 200 || made.status == 409) return Status::ok();
      return failure("cannot create bucket " + o_.bucket, made);
    }
    return failure("cannot reach bucket " + o_.bucket, head);
  }

  std::string describe() const override {
    return "s3 " + o_.endpoint + "/" + o_.bucket + (o_.prefix.empty() ? "" : "/" + o_.prefix);
  }

  Status put(const std::string& key, const std::string& bytes) override {
    TRAINER_RETURN_IF_ERROR(check_key(key));
    Response r = call("PUT", object(key), "", {}, &bytes);
    return r.status == 200 ? Status::ok() : failure("cannot write " + key, r);
  }

  Result<std::string> get(const std::string& key) override {
    TRAINER_RETURN_IF_ERROR(check_key(key));
    Response r = call("GET", object(key), "", {}, nullptr);
    if (r.status == 200) return std::move(r.body);
    if (r.status == 404) return not_found("no artifact " + key + " in " + describe());
    return failure("cannot read " + key, r);
  }

  Result<std::vector<std::string>> list(const std::string& prefix) override {
    if (!prefix.empty()) TRAINER_RETURN_IF_ERROR(check_key(prefix));
    TRAINER_ASSIGN_OR_RETURN(auto objects, list_objects(prefix.empty() ? "" : prefix + "/"));
    std::vector<std::string> keys;
    for (const auto& [k, size] : objects) {
      const std::string name = k.substr(k.rfind('/') + 1);
      if (name != kFolderCommit) keys.push_back(k);
    }
    std::sort(keys.begin(), keys.end());
    return keys;
  }

  Status remove(const std::string& key) override {
    TRAINER_RETURN_IF_ERROR(check_key(key));
    TRAINER_ASSIGN_OR_RETURN(auto objects, list_objects(key + "/"));
    // The commit object goes first: the folder stops existing before its files do.
    std::stable_partition(objects.begin(), objects.end(),
                          [](const auto& o) { return o.first.size() >= 15 && o.first.ends_with(kFolderCommit); });
    objects.push_back({key, 0});
    for (const auto& [k, size] : objects) {
      Response r = call("DELETE", object(k), "", {}, nullptr);
      if (r.status != 204 && r.status != 200 && r.status != 404) return failure("cannot delete " + k, r);
    }
    return Status::ok();
  }

  Result<bool> exists(const std::string& key) override {
    TRAINER_RETURN_IF_ERROR(check_key(key));
    for (const std::string& k : {key, key + "/" + kFolderCommit}) {
      Response r = call("HEAD", object(k), "", {}, nullptr);
      if (r.status == 200) return true;
      if (r.status != 404) return failure("cannot look up " + key, r);
    }
    return false;
  }

  Result<int64_t> size(const std::string& key) override {
    TRAINER_RETURN_IF_ERROR(check_key(key));
    Response r = call("HEAD", object(key), "", {}, nullptr);
    if (r.status == 200) return static_cast<int64_t>(std::atoll(r.headers["content-length"].c_str()));
    if (r.status != 404) return failure("cannot look up " + key, r);
    TRAINER_ASSIGN_OR_RETURN(bool folder, exists(key));
    if (!folder) return not_found("no artifact " + key + " in " + describe());
    TRAINER_ASSIGN_OR_RETURN(auto objects, list_objects(key + "/"));
    int64_t total = 0;
    for (const auto& [k, bytes] : objects) {
      if (!k.ends_with(kFolderCommit)) total += bytes;
    }
    return total;
  }

  Status publish(const std::string& source, const std::string& key) override { return publish_impl(source, key, false); }
  Status publish_new(const std::string& source, const std::string& key) override { return publish_impl(source, key, true); }

  std::string local_path(const std::string& key) const override { return ""; }

  // Each object appears whole or not at all: nothing is left behind to remove.
  Result<int64_t> remove_abandoned_temporaries(std::chrono::seconds) override { return int64_t{0}; }

 private:
  std::string object(const std::string& key) const { return o_.prefix.empty() ? key : o_.prefix + "/" + key; }

  // (key relative to the prefix, bytes) of every object under `sub` (relative, "" = all).
  Result<std::vector<std::pair<std::string, int64_t>>> list_objects(const std::string& sub) {
    std::vector<std::pair<std::string, int64_t>> out;
    const std::string full = o_.prefix.empty() ? sub : o_.prefix + "/" + sub;
    std::string token;
    for (;;) {
      std::string query = "list-type=2&prefix=" + encode(full, false);
      if (!token.empty()) query = "continuation-token=" + encode(token, false) + "&" + query;
      Response r = call("GET", "", query, {}, nullptr);
      if (r.status != 200) return failure("cannot list " + (sub.empty() ? std::string("the bucket") : sub), r);
      for (const auto& c : xml_all(r.body, "Contents")) {
        std::string k = xml_unescape(xml_first(c, "Key"));
        if (!o_.prefix.empty()) k = k.substr(o_.prefix.size() + 1);
        out.push_back({k, std::atoll(xml_first(c, "Size").c_str())});
      }
      if (xml_first(r.body, "IsTruncated") != "true") break;
      token = xml_unescape(xml_first(r.body, "NextContinuationToken"));
      if (token.empty()) break;
    }
    return out;
  }

  Status publish_impl(const std::string& source, const std::string& key, bool only_new) {
    TRAINER_RETURN_IF_ERROR(check_key(key));
    std::error_code ec;
    if (fs::is_regular_file(source, ec)) return upload_file(source, key, only_new);
    if (!fs::is_directory(source, ec)) {
      return failed_precondition("cannot publish " + source + ": not a regular file or folder");
    }
    if (only_new) {
      TRAINER_ASSIGN_OR_RETURN(bool there, exists(key));
      if (there) return already_exists(key + " already holds an artifact in " + describe());
    }
    std::vector<std::string> files;
    for (auto it = fs::recursive_directory_iterator(source, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
      if (it->is_directory()) continue;
      if (!it->is_regular_file()) {
        return failed_precondition("cannot publish " + it->path().string() + ": not a regular file or folder");
      }
      files.push_back(fs::relative(it->path(), source).generic_string());
    }
    if (ec) return internal_error("cannot read " + source + ": " + ec.message());
    std::sort(files.begin(), files.end());
    std::string manifest;
    for (const auto& f : files) {
      TRAINER_RETURN_IF_ERROR(upload_file((fs::path(source) / f).string(), key + "/" + f, only_new));
      manifest += f + "\n";
    }
    Response r = call("PUT", object(key + "/" + kFolderCommit), "", only_new ? if_none_match() : Headers{}, &manifest);
    if (r.status == 200) return Status::ok();
    if (r.status == 412) return already_exists(key + " already holds an artifact in " + describe());
    return failure("cannot commit " + key, r);
  }

  using Headers = std::vector<std::string>;
  static Headers if_none_match() { return {"If-None-Match: *"}; }

  // One file to one object: a single PUT, or a multipart upload above the threshold. With
  // `only_new`, an object already there is compared: the same bytes succeed, others conflict.
  Status upload_file(const std::string& path, const std::string& key, bool only_new) {
    std::error_code ec;
    const auto bytes = static_cast<int64_t>(fs::file_size(path, ec));
    if (ec) return internal_error("cannot read " + path + ": " + ec.message());
    if (only_new) {
      Response head = call("HEAD", object(key), "", {}, nullptr);
      if (head.status == 200) return same_bytes(path, key);
      if (head.status != 404) return failure("cannot look up " + key, head);
    }
    if (bytes > o_.multipart_threshold) return multipart(path, key, bytes, only_new);
    std::ifstream in(path, std::ios::binary);
    std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) return internal_error("cannot read " + path);
    Response r = call("PUT", object(key), "", only_new ? if_none_match() : Headers{}, &body);
    if (r.status == 200) return Status::ok();
    if (r.status == 412) return same_bytes(path, key);
    return failure("cannot write " + key, r);
  }

  Status same_bytes(const std::string& path, const std::string& key) {
    TRAINER_ASSIGN_OR_RETURN(std::string there, get(key));
    std::ifstream in(path, std::ios::binary);
    std::string mine((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (there == mine) return Status::ok();
    return already_exists(key + " already holds different bytes in " + describe());
  }

  Status multipart(const std::string& path, const std::string& key, int64_t bytes, bool only_new) {
    const int64_t part = std::max(o_.part_size, kMinPartSize);
    Response started = call("POST", object(key), "uploads=", {}, nullptr);
    const std::string upload_id = xml_first(started.body, "UploadId");
    if (started.status != 200 || upload_id.empty()) return failure("cannot start a multipart upload of " + key, started);
    auto abort = [&] { call("DELETE", object(key), "uploadId=" + encode(upload_id, false), {}, nullptr); };
    std::ifstream in(path, std::ios::binary);
    std::string complete = "<CompleteMultipartUpload>";
    for (int64_t offset = 0, number = 1; offset < bytes; offset += part, ++number) {
      std::string chunk(static_cast<size_t>(std::min(part, bytes - offset)), '\0');
      in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
      if (!in) {
        abort();
        return internal_error("cannot read " + path);
      }
      Response r = call("PUT", object(key), "partNumber=" + std::to_string(number) + "&uploadId=" + encode(upload_id, false),
                        {}, &chunk);
      if (r.status != 200) {
        abort();
        return failure("cannot upload part " + std::to_string(number) + " of " + key, r);
      }
      complete += "<Part><PartNumber>" + std::to_string(number) + "</PartNumber><ETag>" + r.headers["etag"] +
                  "</ETag></Part>";
    }
    complete += "</CompleteMultipartUpload>";
    Response done = call("POST", object(key), "uploadId=" + encode(upload_id, false), only_new ? if_none_match() : Headers{},
                         &complete);
    // S3 may answer 200 with an <Error> body when completing fails late.
    if (done.status == 200 && done.body.find("<Error>") == std::string::npos) return Status::ok();
    abort();
    if (done.status == 412) return same_bytes(path, key);
    return failure("cannot complete the multipart upload of " + key, done);
  }

  // A status for an answer that is not the one expected: the server's error code and message.
  Status failure(const std::string& what, const Response& r) const {
    if (r.status == 0) return unavailable(what + ": " + describe() + " did not answer: " + r.transport_error);
    std::string code = xml_first(r.body, "Code"), message = xml_first(r.body, "Message");
    std::string detail = "HTTP " + std::to_string(r.status) + (code.empty() ? "" : " " + code) +
                         (message.empty() ? "" : ": " + message);
    if (r.status == 403) {
      return failed_precondition(what + ": " + describe() + " refused the credentials (" + detail +
                                 "); check the access key and secret");
    }
    if (r.status == 404) return not_found(what + ": " + detail);
    return internal_error(what + ": " + describe() + " answered " + detail);
  }

  // One request, retried with backoff on transport errors, 429 and 5xx until the deadline.
  Response call(const std::string& method, const std::string& key, const std::string& query, const Headers& headers,
                const std::string* body) {
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(o_.deadline_seconds));
    double backoff = 0.1;
    for (;;) {
      Response r = once(method, key, query, headers, body, deadline);
      const bool retry = r.status == 0 || r.status == 429 || r.status >= 500;
      if (!retry || Clock::now() + std::chrono::duration<double>(backoff) >= deadline) return r;
      std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
      backoff = std::min(backoff * 2, 5.0);
    }
  }

  Response once(const std::string& method, const std::string& key, const std::string& query, const Headers& headers,
                const std::string* body, Clock::time_point deadline) {
    curl_init_once();
    Response r;
    CURL* curl = curl_easy_init();
    if (curl == nullptr) {
      r.transport_error = "curl_easy_init failed";
      return r;
    }
    std::string url = o_.endpoint + "/" + o_.bucket + (key.empty() ? "" : "/" + encode(key, true));
    if (!query.empty()) url += "?" + query;
    const std::string sigv4 = "aws:amz:" + o_.region + ":s3";
    const std::string userpwd = o_.access_key + ":" + o_.secret_key;
    curl_slist* list = nullptr;
    for (const auto& h : headers) list = curl_slist_append(list, h.c_str());
    // No "Expect:" override: curl would sign the empty header it then does not send.
    std::string payload_hash;
    if (body != nullptr) {
      // The body's SHA-256, signed with the request (S3 servers require the header on uploads).
      payload_hash = "x-amz-content-sha256: " + sha256_hex(*body);
      list = curl_slist_append(list, payload_hash.c_str());
      list = curl_slist_append(list, "Content-Type: application/octet-stream");
    }
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, sigv4.c_str());
    curl_easy_setopt(curl, CURLOPT_USERPWD, userpwd.c_str());
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    if (method == "HEAD") {
      curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
    } else if (body != nullptr) {
      // The body as POST fields, so that curl signs its SHA-256 (x-amz-content-sha256).
      curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body->data());
      curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body->size()));
      curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method.c_str());
    } else if (method != "GET") {
      curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method.c_str());
    }
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &r.body);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, collect_header);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, &r.headers);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max<int64_t>(left, 1)));
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    const CURLcode rc = curl_easy_perform(curl);
    if (rc == CURLE_OK) {
      curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &r.status);
    } else {
      r.transport_error = curl_easy_strerror(rc);
    }
    curl_slist_free_all(list);
    curl_easy_cleanup(curl);
    return r;
  }

  S3Options o_;
};

Result<int64_t> env_bytes(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  if (*end != '\0' || n < 1) return invalid_field(name, std::string("must be a positive number of bytes, got '") + v + "'");
  return static_cast<int64_t>(n);
}

Result<double> env_seconds(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const double n = std::strtod(v, &end);
  if (*end != '\0' || !(n > 0)) return invalid_field(name, std::string("must be a positive number of seconds, got '") + v + "'");
  return n;
}

}  // namespace

Result<std::unique_ptr<Storage>> make_s3_storage(const S3Options& options) {
  if (options.endpoint.empty()) return invalid_field("endpoint", "is required (http://HOST:PORT)");
  if (options.bucket.size() < 3 || options.bucket.size() > 63) {
    return invalid_field("bucket", "must have 3 to 63 characters, got '" + options.bucket + "'");
  }
  if (options.access_key.empty() || options.secret_key.empty()) {
    return invalid_field("credentials", "an access key and a secret key are required");
  }
  auto s = std::make_unique<S3Storage>(options);
  TRAINER_RETURN_IF_ERROR(s->connect());
  return std::unique_ptr<Storage>(std::move(s));
}

Result<S3Options> s3_options_from_uri(const std::string& uri) {
  if (uri.rfind("s3://", 0) != 0) return invalid_field("location", "'" + uri + "' is not an s3://BUCKET[/PREFIX] URI");
  S3Options o;
  const std::string rest = uri.substr(5);
  const size_t slash = rest.find('/');
  o.bucket = rest.substr(0, slash);
  if (slash != std::string::npos) o.prefix = rest.substr(slash + 1);
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v == nullptr ? "" : v);
  };
  o.endpoint = env("TRAINER_S3_ENDPOINT");
  if (o.endpoint.empty()) return invalid_field("TRAINER_S3_ENDPOINT", "is required for " + uri + " (http://HOST:PORT)");
  o.access_key = env("AWS_ACCESS_KEY_ID");
  o.secret_key = env("AWS_SECRET_ACCESS_KEY");
  if (o.access_key.empty() || o.secret_key.empty()) {
    return invalid_field("AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are required for " + uri);
  }
  if (!env("AWS_REGION").empty()) o.region = env("AWS_REGION");
  TRAINER_ASSIGN_OR_RETURN(o.multipart_threshold, env_bytes("TRAINER_S3_MULTIPART_THRESHOLD", o.multipart_threshold));
  TRAINER_ASSIGN_OR_RETURN(o.part_size, env_bytes("TRAINER_S3_PART_SIZE", o.part_size));
  TRAINER_ASSIGN_OR_RETURN(o.deadline_seconds, env_seconds("TRAINER_S3_DEADLINE_SECONDS", o.deadline_seconds));
  return o;
}

Result<std::unique_ptr<Storage>> open_storage(const std::string& location, double max_operation_seconds) {
  if (location.rfind("s3://", 0) == 0) {
    TRAINER_ASSIGN_OR_RETURN(S3Options o, s3_options_from_uri(location));
    if (max_operation_seconds > 0) o.deadline_seconds = std::min(o.deadline_seconds, max_operation_seconds);
    return make_s3_storage(o);
  }
  return make_folder_storage(location);
}

}  // namespace trainer::storage

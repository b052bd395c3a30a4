// The token file (token_file.h).
#include "common/token_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/files.h"

namespace trainer {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The file's document, {"servers": {...}, "caFiles": {...}}; the members missing (or the whole
// file missing, or not the JSON it should be) read as empty objects.
json read_document(const std::string& path) {
  json doc = json::object();
  if (std::ifstream in(path); in) {
    std::stringstream text;
    text << in.rdbuf();
    doc = json::parse(text.str(), nullptr, false);
    if (!doc.is_object()) doc = json::object();
  }
  for (const char* member : {"servers", "caFiles"}) {
    if (!doc.contains(member) || !doc[member].is_object()) doc[member] = json::object();
  }
  return doc;
}

// The string kept under `member` for `server_url`; none when missing or empty.
std::optional<std::string> read_entry(const char* member, const std::string& server_url) {
  const std::string path = token_file_path();
  if (path.empty()) return std::nullopt;
  const json doc = read_document(path);
  const json& entries = doc[member];
  const auto it = entries.find(token_file_key(server_url));
  if (it == entries.end() || !it->is_string() || it->get<std::string>().empty()) return std::nullopt;
  return it->get<std::string>();
}

// Closes a descriptor when it goes out of scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string token_file_path() {
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg && *xdg) {
    return (fs::path(xdg) / "trainer" / "tokens.json").string();
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    return (fs::path(home) / ".config" / "trainer" / "tokens.json").string();
  }
  return "";
}

std::string token_file_key(const std::string& server_url) {
  std::string url = server_url;
  while (!url.empty() && url.back() == '/') url.pop_back();
  std::string scheme = "http";
  if (auto sep = url.find("://"); sep != std::string::npos) {
    scheme = url.substr(0, sep);
    url = url.substr(sep + 3);
  }
  if (auto slash = url.find('/'); slash != std::string::npos) url = url.substr(0, slash);
  std::string host = url, port;
  if (auto colon = url.rfind(':'); colon != std::string::npos && url.find(']', colon) == std::string::npos) {
    host = url.substr(0, colon);
    port = url.substr(colon + 1);
  }
  if (host == "localhost") host = "127.0.0.1";
  if (port.empty()) port = scheme == "https" ? "443" : "80";
  return scheme + "://" + host + ":" + port;
}

std::optional<std::string> read_token_file(const std::string& server_url) { return read_entry("servers", server_url); }

std::optional<std::string> read_ca_file_entry(const std::string& server_url) {
  return read_entry("caFiles", server_url);
}

namespace {

// Changes the file's document with `change` under the file's lock, and replaces the file.
Status update_token_file(const std::function<void(json&)>& change) {
  const std::string path = token_file_path();
  if (path.empty()) return failed_precondition("no token file: neither XDG_CONFIG_HOME nor HOME is set");
  const fs::path dir = fs::path(path).parent_path();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return error_code_status("cannot create the token file's folder", dir.string(), ec);
  ::chmod(dir.c_str(), 0700);
  Fd lock{::open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)};
  if (lock.fd < 0) return errno_status("cannot open the token file's lock", path + ".lock", errno);
  while (::flock(lock.fd, LOCK_EX) != 0) {
    if (errno != EINTR) return errno_status("cannot lock the token file", path + ".lock", errno);
  }
  json doc = read_document(path);
  change(doc);
  if (doc["caFiles"].empty()) doc.erase("caFiles");  // a file without CA files reads as before
  const std::string text = doc.dump(2) + "\n";
  const fs::path tmp = temporary_beside(path);
  {
    Fd out{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)};
    if (out.fd < 0) return errno_status("cannot write the token file", tmp.string(), errno);
    size_t done = 0;
    while (done < text.size()) {
      ssize_t n = ::write(out.fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        return errno_status("cannot write the token file", tmp.string(), err);
      }
      done += static_cast<size_t>(n);
    }
    if (::fsync(out.fd) != 0) {
      const int err = errno;
      ::unlink(tmp.c_str());
      return errno_status("cannot sync the token file", tmp.string(), err);
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return errno_status("cannot replace the token file", path, err);
  }
  return sync_folder(dir);
}

}  // namespace

Status write_token_file(const std::string& server_url, const std::string& token) {
  return update_token_file([&](json& doc) { doc["servers"][token_file_key(server_url)] = token; });
}

Status write_ca_file_entry(const std::string& server_url, const std::string& ca_file) {
  return update_token_file([&](json& doc) {
    const std::string key = token_file_key(server_url);
    if (ca_file.empty()) {
      doc["caFiles"].erase(key);
    } else {
      doc["caFiles"][key] = ca_file;
    }
  });
}

Status forget_server(const std::string& server_url) {
  return update_token_file([&](json& doc) {
    const std::string key = token_file_key(server_url);
    doc["servers"].erase(key);
    doc["caFiles"].erase(key);
  });
}

}  // namespace trainer

// Content hashes (declared in storage/content_hash.h).
#include "storage/content_hash.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <vector>

#include "common/sha256.h"

namespace trainer::storage {
namespace {

namespace fs = std::filesystem;

constexpr size_t kReadChunk = 1 << 20;

// Feeds the file's bytes to `h`; the number of bytes, or failed_precondition.
Result<int64_t> hash_bytes(const fs::path& file, Sha256& h) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return failed_precondition("cannot read " + file.string());
  std::vector<char> buf(kReadChunk);
  int64_t total = 0;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const std::streamsize n = in.gcount();
    if (n > 0) {
      h.update(std::string_view(buf.data(), static_cast<size_t>(n)));
      total += n;
    }
  }
  if (in.bad()) return failed_precondition("cannot read " + file.string());
  return total;
}

}  // namespace

Result<ContentHash> folder_content_hash(const std::string& root) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_regular_file()) files.push_back(it->path());
  }
  if (ec) return failed_precondition("cannot read " + root + ": " + ec.message());
  std::sort(files.begin(), files.end());
  Sha256 h;
  ContentHash out;
  for (const auto& f : files) {
    h.update(fs::relative(f, root).string());
    h.update(std::string_view("\0", 1));
    TRAINER_ASSIGN_OR_RETURN(int64_t n, hash_bytes(f, h));
    out.bytes += n;
    h.update(std::string_view("\0", 1));
  }
  out.sha256 = h.hex_digest();
  return out;
}

Result<ContentHash> file_content_hash(const std::string& path) {
  Sha256 h;
  ContentHash out;
  TRAINER_ASSIGN_OR_RETURN(out.bytes, hash_bytes(path, h));
  out.sha256 = h.hex_digest();
  return out;
}

}  // namespace trainer::storage

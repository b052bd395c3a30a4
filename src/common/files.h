// The file seam: writing a file so that a crash leaves the old bytes or the new ones, never part of
// either, and the small helpers that promise rests on. Storage (storage/storage.h) publishes
// artifacts with them; the engine and trainer-job write their outputs with them.
//
// Thread safety: every function may be called from any thread; concurrent writers of one path
// leave one of their files whole.
#pragma once

#include <filesystem>
#include <string>
#include <system_error>

#include "common/status.h"

namespace trainer {

// Writes `bytes` to `path` atomically: a temporary file beside it, fsync, rename, fsync of the folder.
// Either the whole new content is there afterwards or the old one is, and no temporary remains.
// Errors name the path and the system's reason: resource_exhausted when its disk is full
// (disk_full_status), else kInternal.
[[nodiscard]] Status write_file_atomic(const std::string& path, const std::string& bytes);

// The bytes of the file at `path`; kNotFound when it cannot be read.
[[nodiscard]] Result<std::string> read_file(const std::string& path);

// fsyncs the folder `dir` ("" = the working folder), so that a rename into it survives a crash.
[[nodiscard]] Status sync_folder(const std::filesystem::path& dir);

// Whether the system error `err` (an errno) means the disk, or the user's quota on it, is full.
bool is_disk_full(int err);

// A failed system call `what` ("cannot write") on `path` with the errno `err` as a status:
// resource_exhausted "... no space left on the disk of PATH" when the disk is full (the caller
// adds which folder it is), else kInternal with the system's reason.
Status errno_status(const std::string& what, const std::string& path, int err);
// The same for a std::filesystem error code.
Status error_code_status(const std::string& what, const std::string& path, const std::error_code& ec);

// A path beside `target` that no other writer (thread or process) of this host uses.
std::filesystem::path temporary_beside(const std::filesystem::path& target);

}  // namespace trainer

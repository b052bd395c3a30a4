// The token file (docs/security.md, "The token file"): one API token per server address, kept
// under the user's config folder so that `trainer` on the same machine finds the token trainerd
// wrote at its first start. The file is $XDG_CONFIG_HOME/trainer/tokens.json (else
// $HOME/.config/trainer/tokens.json), mode 0600 in a folder of mode 0700, JSON
// {"servers": {"http://127.0.0.1:9001": "trn_..."}}.
//
// Thread and process safety: writers take an exclusive lock on tokens.json.lock and replace the
// file by a rename, so many trainerds starting at once (the tests') each keep their entry and a
// reader never sees a half-written file.
#pragma once

#include <optional>
#include <string>

#include "common/status.h"

namespace trainer {

// The file's path as the environment says it ("" when neither XDG_CONFIG_HOME nor HOME is set).
std::string token_file_path();

// The key of a server's address: scheme, host and port, "localhost" read as 127.0.0.1 and the
// default port filled in ("http://localhost:9001/" -> "http://127.0.0.1:9001").
std::string token_file_key(const std::string& server_url);

// The token kept for `server_url`; none when the file or the entry is missing or unreadable.
std::optional<std::string> read_token_file(const std::string& server_url);

// Keeps `token` for `server_url` (replacing the entry's old token); other entries stay.
Status write_token_file(const std::string& server_url, const std::string& token);

}  // namespace trainer

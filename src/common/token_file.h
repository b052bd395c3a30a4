// The token file (docs/security.md, "The token file"): one API token per server address, kept
// under the user's config folder so that `trainer` on the same machine finds the token trainerd
// wrote at its first start. The file is $XDG_CONFIG_HOME/trainer/tokens.json (else
// $HOME/.config/trainer/tokens.json), mode 0600 in a folder of mode 0700, JSON
// {"servers": {"http://127.0.0.1:9001": "trn_..."}, "caFiles": {"https://10.0.0.5:9001": "/abs/ca.pem"}}:
// "caFiles" (absent in files written before it) holds the CA file `trainer login` was given for
// an https:// address, used when a command names none (--ca-file, TRAINER_CA_FILE).
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

// The CA file kept for `server_url` (an absolute path); none when missing.
std::optional<std::string> read_ca_file_entry(const std::string& server_url);

// Keeps `ca_file` (an absolute path) for `server_url`; "" forgets the entry. Other entries stay.
Status write_ca_file_entry(const std::string& server_url, const std::string& ca_file);

// Forgets `server_url`'s token and CA file (`trainer logout`). Other entries stay.
Status forget_server(const std::string& server_url);

}  // namespace trainer

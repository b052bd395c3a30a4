// The server's TLS context (internal to src/http; Boost.Asio's types stay out of server.h): made
// from a PEM certificate chain and its unencrypted PEM private key, TLS 1.2 and later only.
#pragma once

#include <memory>
#include <string>

#include <boost/asio/ssl/context.hpp>

#include "common/status.h"

namespace trainer::http {

// The context for serving with `cert_file` and `key_file`. Refuses, naming the setting
// (`tls_cert_file`, `tls_key_file`) and the file: one given without the other, a file that is not
// a readable PEM certificate or key, and a key that is not the certificate's.
Result<std::unique_ptr<boost::asio::ssl::context>> server_tls_context(const std::string& cert_file,
                                                                      const std::string& key_file);

}  // namespace trainer::http

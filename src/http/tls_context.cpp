#include "http/tls_context.h"

#include <boost/asio/ssl.hpp>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

namespace trainer::http {

namespace ssl = boost::asio::ssl;

Result<std::unique_ptr<ssl::context>> server_tls_context(const std::string& cert_file, const std::string& key_file) {
  if (cert_file.empty()) {
    return invalid_field("tls_cert_file",
                         "a TLS key file is given (" + key_file + ") but no certificate file: give both or neither");
  }
  if (key_file.empty()) {
    return invalid_field("tls_key_file",
                         "a TLS certificate file is given (" + cert_file + ") but no key file: give both or neither");
  }
  auto tls = std::make_unique<ssl::context>(ssl::context::tls_server);
  tls->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                   ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
  boost::system::error_code ec;
  tls->use_certificate_chain_file(cert_file, ec);
  if (ec) {
    return invalid_field("tls_cert_file", "'" + cert_file + "' is not a readable PEM certificate: " + ec.message());
  }
  const std::string not_its_key = "'" + key_file + "' is not the private key of the certificate '" + cert_file + "'";
  tls->use_private_key_file(key_file, ssl::context::pem, ec);
  // OpenSSL 3 refuses a key that is not the certificate's as it loads it.
  const auto openssl_error = static_cast<unsigned long>(ec.value());
  if (ec && ec.category() == boost::asio::error::get_ssl_category() && ERR_GET_LIB(openssl_error) == ERR_LIB_X509 &&
      ERR_GET_REASON(openssl_error) == X509_R_KEY_VALUES_MISMATCH) {
    return invalid_field("tls_key_file", not_its_key);
  }
  if (ec) {
    return invalid_field("tls_key_file",
                         "'" + key_file + "' is not a readable PEM private key (unencrypted): " + ec.message());
  }
  if (SSL_CTX_check_private_key(tls->native_handle()) != 1) {
    ERR_clear_error();
    return invalid_field("tls_key_file", not_its_key);
  }
  return tls;
}

}  // namespace trainer::http

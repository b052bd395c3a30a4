// Where calls that a user's plan names may go (docs/security.md, "Outbound calls"): trainerd's
// `outbound.allow`, a list of HOST:PORT rules. A URL a plan names (an `http:` reward term or
// grader) is checked at submission, by trainerd, and again at connection time, by the job, on the
// address the call is about to connect to: a name that resolved to an allowed address when it was
// checked and to another one at the call (DNS rebinding) is refused there.
//
// A rule's HOST is a name ("judge.example.com"), a wildcard ("*" any host, "*.example.com" its
// subdomains), an IP address or a CIDR block ("10.1.0.0/16"); its PORT a number or "*". Internal
// addresses (loopback, link-local and the cloud metadata address, private and shared ranges,
// unspecified) are reached only through a rule that names them explicitly: an IP or CIDR rule
// holding the address, or a rule naming the URL's host exactly, never a wildcard.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

struct sockaddr;

namespace trainer {

struct OutboundRule {
  std::string host;  // as written, lowercased: a name, "*", "*.SUFFIX", an IP or a CIDR block
  int port = 0;      // 0: any port
  bool operator==(const OutboundRule&) const = default;
};

struct OutboundPolicy {
  std::vector<OutboundRule> allow;
  // outbound.proxy: "http://HOST:PORT" of the HTTP proxy every checked call goes through (CONNECT
  // for https://, the absolute URL for http://); "" = calls connect directly. Through a proxy the
  // target's HOST:PORT is checked before the call (its name resolved here); the address the proxy
  // then connects to is the proxy's to check (docs/security.md, "Outbound calls").
  std::string proxy;
  bool operator==(const OutboundPolicy&) const = default;
};

// `["HOST:PORT", ...]` as a policy; a bad rule is invalid_field(`field` + "[i]") naming it.
Result<OutboundPolicy> parse_outbound_policy(const nlohmann::json& rules, const std::string& field);
// outbound.proxy as given: "http://HOST:PORT" (a trailing "/" dropped); anything else (another
// scheme, credentials, a path, no port) is invalid_field(`field`) naming it.
Result<std::string> parse_outbound_proxy(const nlohmann::json& value, const std::string& field);
// The rules as written again ("HOST:PORT", "*" for any port): what a job is handed.
nlohmann::json outbound_policy_json(const OutboundPolicy& policy);

// Why `address` (a numeric IPv4 or IPv6 address) is internal ("a loopback address", ...), or ""
// when it is not.
std::string internal_address_kind(const std::string& address);

// Whether a call to `url_host`:`port` may connect to `address` (numeric); "" when it may, else why
// not, in words naming the address and what to list.
std::string outbound_refusal(const OutboundPolicy& policy, const std::string& url_host, int port,
                             const std::string& address);

// A URL's host (lowercased, IPv6 without brackets) and port (its scheme's default when absent);
// false when it is not an http:// or https:// URL with a host.
bool url_host_port(const std::string& url, std::string* host, int* port);

// The submission check of `url`: its host resolved (or taken as written when it is an address)
// and every address it resolves to allowed; invalid_field(`field`) naming the first refusal. A
// name that does not resolve now is allowed only by a rule naming it exactly (or a wildcard rule
// for its name): the call is checked again when it connects.
Status check_outbound_url(const OutboundPolicy& policy, const std::string& url, const std::string& field);

// The check of a declared "HOST:PORT" (a term's network.allow): HOST a name or an IP address,
// PORT a number; allowed as a URL to it would be (check_outbound_url()). invalid_field(`field`)
// naming the entry when it is malformed or not allowed.
Status check_outbound_entry(const OutboundPolicy& policy, const std::string& entry, const std::string& field);

// The numeric addresses `host` resolves to (getaddrinfo; the test hosts file first, see
// test_resolve_entries()); empty when it does not resolve.
std::vector<std::string> resolve_addresses(const std::string& host);

// FAKE, for tests only: the DNS answers of TRAINER_TEST_HOSTS_FILE, a file of "NAME ADDRESS"
// lines read at each call, so that a test can change a name's answer between a check and a call
// (a DNS server that rebinds cannot be set up for a process here). As curl --resolve entries
// ("NAME:PORT:ADDRESS") for `port`; empty when the variable is unset.
std::vector<std::string> test_resolve_entries(int port);

// The check at connection time (common/http_client.h's HttpRequest::outbound): whether the socket
// address curl is about to connect to is allowed for the URL's host; "" when it is.
std::string outbound_refusal_at_connect(const OutboundPolicy& policy, const std::string& url_host, int port,
                                        const sockaddr* address);

}  // namespace trainer

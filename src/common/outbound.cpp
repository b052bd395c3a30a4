// Outbound rules and their checks (common/outbound.h).
#include "common/outbound.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

namespace trainer {
namespace {

// An address as 16 bytes (IPv4 as IPv4-mapped IPv6), so that one comparison serves both.
using Bytes = std::array<unsigned char, 16>;

std::optional<Bytes> parse_address(const std::string& text) {
  Bytes b{};
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    b[10] = b[11] = 0xff;
    std::memcpy(b.data() + 12, &v4, 4);
    return b;
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    std::memcpy(b.data(), &v6, 16);
    return b;
  }
  return std::nullopt;
}

bool is_v4(const Bytes& b) {
  for (int i = 0; i < 10; ++i) {
    if (b[i] != 0) return false;
  }
  return b[10] == 0xff && b[11] == 0xff;
}

// Whether the first `bits` bits of a and b agree.
bool same_prefix(const Bytes& a, const Bytes& b, int bits) {
  for (int i = 0; i < 16 && bits > 0; ++i, bits -= 8) {
    const unsigned char mask = bits >= 8 ? 0xff : static_cast<unsigned char>(0xff << (8 - bits));
    if ((a[i] & mask) != (b[i] & mask)) return false;
  }
  return true;
}

// A CIDR block (an address alone is a /32 or /128), its prefix length counted on 16 bytes.
struct Block {
  Bytes base;
  int bits;
};

std::optional<Block> parse_block(const std::string& text) {
  const size_t slash = text.find('/');
  auto base = parse_address(text.substr(0, slash));
  if (!base) return std::nullopt;
  const int width = is_v4(*base) ? 32 : 128;
  int bits = width;
  if (slash != std::string::npos) {
    const std::string n = text.substr(slash + 1);
    if (n.empty() || n.size() > 3 || n.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    bits = std::stoi(n);
    if (bits > width) return std::nullopt;
  }
  return Block{*base, bits + (width == 32 ? 96 : 0)};
}

bool in_block(const Bytes& a, const std::string& block) {
  auto b = parse_block(block);
  return b && same_prefix(a, b->base, b->bits);
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_') return false;
  }
  return true;
}

bool port_matches(const OutboundRule& r, int port) { return r.port == 0 || r.port == port; }

// Whether the rule names `host` by its name: exactly, or (wildcard) as any host or a subdomain.
bool names_host(const OutboundRule& r, const std::string& host, bool* exactly) {
  *exactly = r.host == host;
  if (*exactly) return true;
  if (r.host == "*") return true;
  if (r.host.rfind("*.", 0) == 0) {
    const std::string suffix = r.host.substr(1);  // ".example.com"
    return host.size() > suffix.size() && host.compare(host.size() - suffix.size(), suffix.size(), suffix) == 0;
  }
  return false;
}

std::string with_port(const std::string& host, int port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace

Result<OutboundPolicy> parse_outbound_policy(const nlohmann::json& rules, const std::string& field) {
  if (!rules.is_array()) return invalid_field(field, "must be a list of HOST:PORT rules, e.g. [\"judge.example.com:443\"]");
  OutboundPolicy out;
  for (size_t i = 0; i < rules.size(); ++i) {
    const std::string at = field + "[" + std::to_string(i) + "]";
    if (!rules[i].is_string()) return invalid_field(at, "must be a string HOST:PORT, got " + rules[i].dump());
    const std::string text = lower(rules[i].get<std::string>());
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
      return invalid_field(at, "'" + text + "' is not HOST:PORT (a port number, or * for any port)");
    }
    std::string host = text.substr(0, colon);
    const std::string port = text.substr(colon + 1);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    OutboundRule r;
    r.host = host;
    if (port != "*") {
      if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) < 1 ||
          std::stoi(port) > 65535) {
        return invalid_field(at, "'" + text + "': the port must be 1-65535 or *");
      }
      r.port = std::stoi(port);
    }
    const bool wildcard = host == "*" || (host.rfind("*.", 0) == 0 && valid_name(host.substr(2)));
    if (!wildcard && !parse_block(host) && !valid_name(host)) {
      return invalid_field(at, "'" + text + "': the host must be a name, *, *.DOMAIN, an IP address or a CIDR block");
    }
    out.allow.push_back(std::move(r));
  }
  return out;
}

nlohmann::json outbound_policy_json(const OutboundPolicy& policy) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : policy.allow) {
    const std::string host = r.host.find(':') != std::string::npos ? "[" + r.host + "]" : r.host;
    out.push_back(host + ":" + (r.port == 0 ? std::string("*") : std::to_string(r.port)));
  }
  return out;
}

std::string internal_address_kind(const std::string& address) {
  auto a = parse_address(address);
  if (!a) return "";
  struct Range {
    const char* block;
    const char* kind;
  };
  static const Range kRanges[] = {
      {"127.0.0.0/8", "a loopback address"},
      {"::1/128", "a loopback address"},
      {"169.254.0.0/16", "a link-local address (the cloud metadata service's range)"},
      {"fe80::/10", "a link-local address"},
      {"0.0.0.0/8", "an unspecified address"},
      {"::/128", "an unspecified address"},
      {"10.0.0.0/8", "a private address"},
      {"172.16.0.0/12", "a private address"},
      {"192.168.0.0/16", "a private address"},
      {"100.64.0.0/10", "a shared (carrier-grade NAT) address"},
      {"fc00::/7", "a private (unique local) address"},
  };
  for (const auto& r : kRanges) {
    if (in_block(*a, r.block)) return r.kind;
  }
  return "";
}

std::string outbound_refusal(const OutboundPolicy& policy, const std::string& url_host, int port,
                             const std::string& address) {
  const std::string host = lower(url_host);
  auto a = parse_address(address);
  if (!a) return "'" + address + "' is not an address";
  const std::string internal = internal_address_kind(address);
  for (const auto& r : policy.allow) {
    if (!port_matches(r, port)) continue;
    if (in_block(*a, r.host)) return "";  // an IP or CIDR rule holding the address
    bool exactly = false;
    if (names_host(r, host, &exactly) && (internal.empty() || exactly)) return "";
  }
  const std::string target = with_port(host, port) + (host == address ? "" : " (" + address + ")");
  if (!internal.empty()) {
    return "calls to " + target + " are not allowed: " + address + " is " + internal +
           ", reached only through a rule of trainerd's outbound.allow that names it (e.g. '" +
           with_port(address, port) + "'), never a wildcard";
  }
  return "calls to " + target + " are not allowed by trainerd's outbound.allow (" +
         (policy.allow.empty() ? std::string("empty: no outbound call a plan names is allowed")
                               : std::to_string(policy.allow.size()) + " rules, none for this host and port") +
         "); an operator adds e.g. '" + with_port(host, port) + "'";
}

bool url_host_port(const std::string& url, std::string* host, int* port) {
  const bool https = url.rfind("https://", 0) == 0;
  if (!https && url.rfind("http://", 0) != 0) return false;
  std::string rest = url.substr(https ? 8 : 7);
  rest = rest.substr(0, rest.find_first_of("/?#"));
  const size_t at = rest.rfind('@');
  if (at != std::string::npos) rest = rest.substr(at + 1);
  std::string h;
  std::string p;
  if (!rest.empty() && rest[0] == '[') {
    const size_t close = rest.find(']');
    if (close == std::string::npos) return false;
    h = rest.substr(1, close - 1);
    if (close + 1 < rest.size()) {
      if (rest[close + 1] != ':') return false;
      p = rest.substr(close + 2);
    }
  } else {
    const size_t colon = rest.find(':');
    h = rest.substr(0, colon);
    if (colon != std::string::npos) p = rest.substr(colon + 1);
  }
  if (h.empty()) return false;
  int n = https ? 443 : 80;
  if (!p.empty()) {
    if (p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos) return false;
    n = std::stoi(p);
    if (n < 1 || n > 65535) return false;
  }
  *host = lower(h);
  *port = n;
  return true;
}

namespace {

// The test hosts file's (name, address) lines; none when TRAINER_TEST_HOSTS_FILE is unset.
std::vector<std::pair<std::string, std::string>> test_hosts() {
  std::vector<std::pair<std::string, std::string>> out;
  const char* file = std::getenv("TRAINER_TEST_HOSTS_FILE");
  if (file == nullptr || *file == '\0') return out;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string name, address;
    if (words >> name >> address) out.emplace_back(lower(name), address);
  }
  return out;
}

}  // namespace

std::vector<std::string> test_resolve_entries(int port) {
  std::vector<std::string> out;
  for (const auto& [name, address] : test_hosts()) out.push_back(name + ":" + std::to_string(port) + ":" + address);
  return out;
}

std::vector<std::string> resolve_addresses(const std::string& host) {
  const std::string name = lower(host);
  if (parse_address(name)) return {name};
  std::vector<std::string> out;
  for (const auto& [listed, address] : test_hosts()) {
    if (listed == name) out.push_back(address);
  }
  if (!out.empty()) return out;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(name.c_str(), nullptr, &hints, &found) != 0) return out;
  for (addrinfo* p = found; p != nullptr; p = p->ai_next) {
    char text[INET6_ADDRSTRLEN] = {0};
    const void* raw = p->ai_family == AF_INET ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(p->ai_addr)->sin_addr)
                                              : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(p->ai_addr)->sin6_addr);
    if (inet_ntop(p->ai_family, raw, text, sizeof text) != nullptr &&
        std::find(out.begin(), out.end(), text) == out.end()) {
      out.push_back(text);
    }
  }
  freeaddrinfo(found);
  return out;
}

Status check_outbound_url(const OutboundPolicy& policy, const std::string& url, const std::string& field) {
  std::string host;
  int port = 0;
  if (!url_host_port(url, &host, &port)) return invalid_field(field, "'" + url + "' is not an http:// or https:// URL with a host");
  const std::vector<std::string> addresses = resolve_addresses(host);
  if (addresses.empty()) {
    for (const auto& r : policy.allow) {
      bool exactly = false;
      if (port_matches(r, port) && names_host(r, host, &exactly)) return Status::ok();  // checked again at the call
    }
    return invalid_field(field, "'" + host + "' does not resolve, and no rule of trainerd's outbound.allow names it");
  }
  for (const auto& a : addresses) {
    const std::string why = outbound_refusal(policy, host, port, a);
    if (!why.empty()) return invalid_field(field, why);
  }
  return Status::ok();
}

Result<std::string> parse_outbound_proxy(const nlohmann::json& value, const std::string& field) {
  const std::string hint = "must be the URL of an HTTP proxy, http://HOST:PORT (e.g. \"http://proxy.internal:3128\")";
  if (!value.is_string()) return invalid_field(field, hint);
  std::string url = value.get<std::string>();
  if (url.empty()) return url;
  if (!url.empty() && url.back() == '/') url.pop_back();
  // Credentials are not echoed: the error goes to trainerd's log.
  if (url.find('@') != std::string::npos) return invalid_field(field, hint + ", with no credentials in it");
  const std::string prefix = "http://";
  if (url.rfind(prefix, 0) != 0) return invalid_field(field, "'" + url + "' " + hint);
  const std::string rest = url.substr(prefix.size());
  if (rest.find_first_of("/?#") != std::string::npos) return invalid_field(field, "'" + url + "' " + hint + ", with no path");
  std::string host;
  int port = 0;
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon + 1 == rest.size() || rest.back() == ']' ||
      !url_host_port(url, &host, &port) || host.empty()) {
    return invalid_field(field, "'" + url + "' " + hint + ": name its port");
  }
  return url;
}

Status check_outbound_entry(const OutboundPolicy& policy, const std::string& entry, const std::string& field) {
  const size_t colon = entry.rfind(':');
  std::string host = colon == std::string::npos ? "" : entry.substr(0, colon);
  const std::string port = colon == std::string::npos ? "" : entry.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const bool numeric_port = !port.empty() && port.size() <= 5 && port.find_first_not_of("0123456789") == std::string::npos &&
                            std::stoi(port) >= 1 && std::stoi(port) <= 65535;
  if (host.empty() || !numeric_port || (!valid_name(host) && !parse_address(host))) {
    return invalid_field(field, "'" + entry + "' is not HOST:PORT (a host name or IP address, and a port number 1-65535)");
  }
  const std::string url = "http://" + with_port(lower(host), std::stoi(port)) + "/";
  Status st = check_outbound_url(policy, url, field);
  if (!st.is_ok()) return invalid_field(field, "'" + entry + "': " + st.message());
  return Status::ok();
}

std::string outbound_refusal_at_connect(const OutboundPolicy& policy, const std::string& url_host, int port,
                                        const sockaddr* address) {
  char text[INET6_ADDRSTRLEN] = {0};
  const void* raw = nullptr;
  if (address->sa_family == AF_INET) {
    raw = &reinterpret_cast<const sockaddr_in*>(address)->sin_addr;
  } else if (address->sa_family == AF_INET6) {
    raw = &reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr;
  } else {
    return "calls over address family " + std::to_string(address->sa_family) + " are not allowed";
  }
  if (inet_ntop(address->sa_family, raw, text, sizeof text) == nullptr) return "an unreadable address";
  std::string numeric = text;
  // An IPv4-mapped IPv6 address is judged as the IPv4 address it maps.
  if (numeric.rfind("::ffff:", 0) == 0 && numeric.find('.') != std::string::npos) numeric = numeric.substr(7);
  return outbound_refusal(policy, url_host, port, numeric);
}

}  // namespace trainer

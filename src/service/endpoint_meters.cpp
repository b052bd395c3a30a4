#include "service/endpoint_meters.h"

#include <algorithm>
#include <cstdio>
#include <set>

namespace trainer::service {
namespace {

// Upper bounds (seconds) of the latency histograms' buckets.
constexpr double kBuckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
constexpr size_t kBucketCount = sizeof(kBuckets) / sizeof(kBuckets[0]);

// A label value escaped for the text format.
std::string escaped(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string labels(const std::string& endpoint, const std::string& model) {
  return "endpoint=\"" + escaped(endpoint) + "\",model=\"" + escaped(model) + "\"";
}

void header(std::string& out, const std::string& name, const std::string& type, const std::string& help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

}  // namespace

void EndpointMeters::request(const std::string& endpoint, const std::string& model, const std::string& outcome,
                             long prompt_tokens, long completion_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{endpoint, model, outcome}];
  const Key key{endpoint, model};
  prompt_tokens_[key] += std::max(0L, prompt_tokens);
  completion_tokens_[key] += std::max(0L, completion_tokens);
}

void EndpointMeters::observe(Histogram& h, double seconds) {
  if (h.counts.empty()) h.counts.assign(kBucketCount + 1, 0);
  size_t i = 0;
  while (i < kBucketCount && seconds > kBuckets[i]) ++i;
  ++h.counts[i];
  h.sum += seconds;
  ++h.count;
}

void EndpointMeters::first_token(const std::string& endpoint, const std::string& model, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  observe(first_token_[{endpoint, model}], seconds);
}

void EndpointMeters::inter_token(const std::string& endpoint, const std::string& model, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  observe(inter_token_[{endpoint, model}], seconds);
}

std::string EndpointMeters::render(const std::vector<std::string>& active, const std::vector<KvBlocks>& kv) {
  const std::set<std::string> open(active.begin(), active.end());
  std::lock_guard<std::mutex> lock(mu_);
  auto gone = [&open](const std::string& endpoint) { return open.count(endpoint) == 0; };
  std::erase_if(requests_, [&](const auto& e) { return gone(std::get<0>(e.first)); });
  for (auto* m : {&prompt_tokens_, &completion_tokens_}) std::erase_if(*m, [&](const auto& e) { return gone(e.first.first); });
  for (auto* m : {&first_token_, &inter_token_}) std::erase_if(*m, [&](const auto& e) { return gone(e.first.first); });

  if (open.empty()) return "";  // a deployment without endpoints shows none of these families
  std::string out;
  header(out, "trainer_endpoint_requests_total", "counter", "Requests trainerd forwarded to an endpoint, by outcome.");
  for (const auto& [k, v] : requests_) {
    out += "trainer_endpoint_requests_total{" + labels(std::get<0>(k), std::get<1>(k)) + ",outcome=\"" +
           escaped(std::get<2>(k)) + "\"} " + std::to_string(v) + "\n";
  }
  const std::pair<const char*, std::map<Key, long>*> tokens[] = {
      {"trainer_endpoint_prompt_tokens_total", &prompt_tokens_}, {"trainer_endpoint_completion_tokens_total", &completion_tokens_}};
  for (const auto& [name, series] : tokens) {
    header(out, name, "counter", "Tokens of the forwarded requests' answers (their usage).");
    for (const auto& [k, v] : *series) out += std::string(name) + "{" + labels(k.first, k.second) + "} " + std::to_string(v) + "\n";
  }
  const std::pair<const char*, std::map<Key, Histogram>*> histograms[] = {
      {"trainer_endpoint_time_to_first_token_seconds", &first_token_},
      {"trainer_endpoint_inter_token_latency_seconds", &inter_token_}};
  for (const auto& [name, series] : histograms) {
    header(out, name, "histogram", "Latency of streamed answers as trainerd passes them on.");
    for (const auto& [k, h] : *series) {
      const std::string l = labels(k.first, k.second);
      long cumulative = 0;
      for (size_t i = 0; i <= kBucketCount; ++i) {
        cumulative += h.counts[i];
        const std::string le = i < kBucketCount ? number(kBuckets[i]) : "+Inf";
        out += std::string(name) + "_bucket{" + l + ",le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
      }
      out += std::string(name) + "_sum{" + l + "} " + number(h.sum) + "\n";
      out += std::string(name) + "_count{" + l + "} " + std::to_string(h.count) + "\n";
    }
  }
  header(out, "trainer_endpoint_kv_blocks", "gauge", "KV-cache blocks of an endpoint's serving process: used by requests, cached for a prompt prefix, total.");
  for (const auto& b : kv) {
    const std::string e = "endpoint=\"" + escaped(b.endpoint) + "\"";
    out += "trainer_endpoint_kv_blocks{" + e + ",state=\"used\"} " + std::to_string(b.used) + "\n";
    out += "trainer_endpoint_kv_blocks{" + e + ",state=\"cached\"} " + std::to_string(b.cached) + "\n";
    out += "trainer_endpoint_kv_blocks{" + e + ",state=\"total\"} " + std::to_string(b.total) + "\n";
  }
  return out;
}

}  // namespace trainer::service

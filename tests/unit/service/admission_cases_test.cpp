// Admission as a pure function, driven by the cases in admission_cases.json (kept as data, the
// way duckdb keeps its test cases): each case names its pools, quotas and queue, and what must be
// granted and what must stay queued.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "service/admission.h"

namespace trainer::service {
namespace {

using json = nlohmann::json;

json load_cases() {
  std::ifstream in(TRAINER_ADMISSION_CASES);
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

AdmissionInput input_of(const json& c) {
  AdmissionInput in;
  for (const auto& [name, p] : c.at("pools").items()) {
    in.pools[name] = AdmissionPool{p.at("declared").get<int>(), p.at("maxClaim").get<int>(),
                                   p.value("deviceIds", std::vector<int>{})};
  }
  if (c.contains("quotas")) {
    for (const auto& [w, q] : c["quotas"].items()) in.quotas[w] = q.get<int>();
  }
  in.default_quota = c.at("defaultQuota").get<int>();
  for (const auto& row : c.at("claims")) {
    in.claims.push_back(AdmissionClaim{row.at(0).get<std::string>(), row.at(1).get<std::string>(),
                                       row.at(2).get<std::string>(), row.at(3).get<int>(), row.at(4).get<bool>(),
                                       row.size() > 5 ? row.at(5).get<std::vector<int>>() : std::vector<int>{}});
  }
  return in;
}

TEST(Admission, EveryCaseOfTheTable) {
  const json cases = load_cases().at("cases");
  ASSERT_GE(cases.size(), 10u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    AdmissionResult r = admit(input_of(c));
    EXPECT_EQ(r.granted, c.at("granted").get<std::vector<std::string>>());
    EXPECT_EQ(r.queued, c.at("queued").get<std::vector<std::string>>());
    if (c.contains("placed")) {
      EXPECT_EQ(r.placed, (c.at("placed").get<std::map<std::string, std::vector<int>>>()));
    }
  }
}

TEST(Admission, EveryGrantHoldsItsOwnDevices) {
  // Whatever the case, after admission no two granted claims of a pool share a device index,
  // each holds as many as it claimed, and each index is one of the pool's.
  for (const auto& c : load_cases().at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    AdmissionInput in = input_of(c);
    AdmissionResult r = admit(in);
    std::map<std::string, std::set<int>> held;
    for (const auto& claim : in.claims) {
      const bool now = std::count(r.granted.begin(), r.granted.end(), claim.owner) > 0;
      if (!claim.granted && !now) {
        EXPECT_EQ(r.placed.count(claim.owner), 0u);
        continue;
      }
      const std::vector<int> ids = r.placed.count(claim.owner) ? r.placed.at(claim.owner) : claim.device_ids;
      if (in.pools.count(claim.pool) && now) {
        EXPECT_EQ(static_cast<int>(ids.size()), claim.devices) << claim.owner;
        const auto pool_ids = pool_device_ids(in.pools.at(claim.pool));
        for (int id : ids) EXPECT_TRUE(std::count(pool_ids.begin(), pool_ids.end(), id)) << claim.owner << " " << id;
      }
      for (int id : ids) EXPECT_TRUE(held[claim.pool].insert(id).second) << "device " << id << " shared";
    }
  }
}

TEST(Admission, GrantingIsStable) {
  // Applying the grants and admitting again grants nothing more and keeps the same queue.
  for (const auto& c : load_cases().at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    AdmissionInput in = input_of(c);
    AdmissionResult first = admit(in);
    for (auto& claim : in.claims) {
      for (const auto& g : first.granted) claim.granted = claim.granted || claim.owner == g;
      if (first.placed.count(claim.owner)) claim.device_ids = first.placed.at(claim.owner);
    }
    AdmissionResult second = admit(in);
    EXPECT_TRUE(second.granted.empty());
    for (const auto& [owner, ids] : second.placed) EXPECT_TRUE(ids.empty()) << owner << " placed again";
    EXPECT_EQ(second.queued, first.queued);
  }
}

TEST(Admission, ReadingOnlyTheQueuedClaimsOfPoolsWithRoomDecidesTheSame) {
  // What the store applies (admission_glue.cpp): the granted claims, then only the queued claims
  // of pools_with_room(). Whatever the case, it grants, places and queues as admission over every
  // claim, but for the queued claims of pools without room, which stay queued unread.
  for (const auto& c : load_cases().at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const AdmissionInput all = input_of(c);
    AdmissionInput granted = all;
    granted.claims.clear();
    for (const auto& claim : all.claims) {
      if (claim.granted) granted.claims.push_back(claim);
    }
    const std::set<std::string> room = pools_with_room(granted);
    AdmissionInput read = granted;
    for (const auto& claim : all.claims) {
      if (!claim.granted && room.count(claim.pool)) read.claims.push_back(claim);
    }
    const AdmissionResult full = admit(all);
    const AdmissionResult part = admit(read);
    EXPECT_EQ(part.granted, full.granted);
    EXPECT_EQ(part.placed, full.placed);
    std::vector<std::string> queued_with_room;
    for (const auto& owner : full.queued) {
      for (const auto& claim : all.claims) {
        if (claim.owner == owner && room.count(claim.pool)) queued_with_room.push_back(owner);
      }
    }
    EXPECT_EQ(part.queued, queued_with_room);
  }
}

TEST(Admission, APoolWithoutAFreeDeviceHasNoRoom) {
  AdmissionInput in;
  in.pools["full"] = AdmissionPool{1, 1};
  in.pools["free"] = AdmissionPool{2, 1};
  in.pools["shrunk"] = AdmissionPool{1, 2};                // its window closed under a claim of two
  in.pools["taken"] = AdmissionPool{3, 1, {0, 1}};         // declared 3, but its two indices are held
  in.pools["idle"] = AdmissionPool{1, 1};
  in.default_quota = 100;
  in.claims = {{"a", "w", "full", 1, true, {0}},
               {"b", "w", "free", 1, true, {0}},
               {"c", "w", "shrunk", 2, true, {0, 1}},
               {"d", "w", "taken", 2, true, {0, 1}},
               {"e", "w", "idle", 1, false},                // queued claims count nothing
               {"f", "w", "elsewhere", 1, true, {0}}};      // a pool the configuration does not name
  EXPECT_EQ(pools_with_room(in), (std::set<std::string>{"free", "idle"}));
}

}  // namespace
}  // namespace trainer::service

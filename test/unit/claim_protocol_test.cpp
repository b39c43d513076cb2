// run_claim over a scripted ClaimStore: the order of the steps, what each costs and what
// the claim writes. The fake returns canned snapshots and records every call, so each test
// says what a store was asked and what the claim made of the answers.
#include "core/claim_protocol.hpp"

#include "core/claim_request.hpp"
#include "core/expired_takeover.hpp"
#include "core/error.hpp"
#include "expect_core_error.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace relaybus::core {
namespace {

using Names = std::vector<std::string>;
using testing::ThrowsCoreError;
using testing::ThrowsInvalidParameter;

// A CandidateLane as the store saw it (the pointer is only valid during the call).
struct AskedLane {
  std::string handler;
  std::int16_t lane = 0;
  std::int64_t epoch = 0;
  Names excluded;
  int room = 0;
};

struct CandidatesCall {
  std::vector<AskedLane> lanes;
  int limit = 0;
};

struct AcquireCall {
  std::vector<std::pair<std::string, std::int16_t>> window;
  int wanted = 0;
};

class ScriptedStore final : public ClaimStore {
 public:
  // The script.
  Names subscribed{"h"};
  Names paused;  // of subscribed
  std::vector<HeldLane> held;
  std::vector<LaneSnapshot> takeover;  // what lock_for_takeover re-reads (matched by lane)
  std::map<std::string, std::int32_t> attempts;  // of lost deliveries, by event id
  RetryPolicy policy;
  std::vector<LaneRef> work;
  std::deque<std::vector<AcquiredLane>> acquirable;  // one answer per round
  std::deque<std::vector<CandidateRow>> rows;        // one answer per candidates() call

  // What was asked.
  Names calls;
  std::vector<Names> held_asked;
  std::vector<LaneRef> takeover_asked;
  std::vector<DeliveryRef> lost_asked;
  std::vector<Charge> charges;
  std::vector<AcquireCall> acquire_calls;
  std::vector<CandidatesCall> candidate_calls;
  std::vector<LaneUpdate> updates;

  std::vector<SubscribedHandler> subscribed_handlers(
      const std::optional<Names>& requested) override {
    calls.push_back("subscribed_handlers");
    Names names;
    for (const auto& h : subscribed)
      if (!requested || std::find(requested->begin(), requested->end(), h) != requested->end())
        names.push_back(h);
    std::sort(names.begin(), names.end());
    std::vector<SubscribedHandler> out;
    for (const auto& h : names)
      out.push_back({h, std::find(paused.begin(), paused.end(), h) != paused.end()});
    return out;
  }

  std::vector<HeldLane> held_lanes(const Names& handlers) override {
    calls.push_back("held_lanes");
    held_asked.push_back(handlers);
    return held;
  }

  std::vector<LaneSnapshot> lock_for_takeover(const std::vector<LaneRef>& lanes) override {
    calls.push_back("lock_for_takeover");
    std::vector<LaneSnapshot> out;
    for (const auto& ref : lanes) {
      takeover_asked.push_back(ref);
      for (const auto& s : takeover)
        if (s.handler == ref.handler && s.lane == ref.lane) out.push_back(s);
    }
    return out;
  }

  std::vector<LostDelivery> lock_lost(const std::vector<DeliveryRef>& deliveries) override {
    calls.push_back("lock_lost");
    std::vector<LostDelivery> out;
    for (const auto& d : deliveries) {
      lost_asked.push_back(d);
      auto it = attempts.find(d.event_id);
      if (it != attempts.end()) out.push_back({d.handler, d.event_id, it->second, policy});
    }
    return out;
  }

  void write_charges(const std::vector<Charge>& c) override {
    calls.push_back("write_charges");
    charges.insert(charges.end(), c.begin(), c.end());
  }

  std::vector<LaneRef> lanes_with_work(const Names&) override {
    calls.push_back("lanes_with_work");
    return work;
  }

  std::vector<AcquiredLane> lock_acquirable(const std::vector<LaneRef>& window,
                                            int wanted) override {
    calls.push_back("lock_acquirable");
    AcquireCall call;
    for (const auto& r : window) call.window.push_back({r.handler, r.lane});
    call.wanted = wanted;
    acquire_calls.push_back(std::move(call));
    if (acquirable.empty()) return {};
    auto out = std::move(acquirable.front());
    acquirable.pop_front();
    return out;
  }

  std::vector<CandidateRow> candidates(const std::vector<CandidateLane>& lanes,
                                       int limit) override {
    calls.push_back("candidates");
    CandidatesCall call;
    for (const auto& l : lanes)
      call.lanes.push_back({l.lane->handler, l.lane->lane, l.lane->epoch, l.excluded, l.room});
    call.limit = limit;
    candidate_calls.push_back(std::move(call));
    if (rows.empty()) return {};
    auto out = std::move(rows.front());
    rows.pop_front();
    return out;
  }

  std::vector<bool> write_lanes(const std::vector<LaneUpdate>& u) override {
    calls.push_back("write_lanes");
    updates.insert(updates.end(), u.begin(), u.end());
    std::vector<bool> took;
    for (const auto& one : u) {
      const int seen = writes_seen[{one.handler, one.lane}]++;
      const auto from = refused_from.find({one.handler, one.lane});
      took.push_back(refused_writes.count({one.handler, one.lane}) == 0 &&
                     (from == refused_from.end() || seen < from->second));
    }
    return took;
  }

  LaneConcurrency concurrency() const override { return mode; }

  void clear_lost(const std::vector<LaneRef>& lanes,
                  const std::vector<std::int64_t>& epochs) override {
    calls.push_back("clear_lost");
    for (std::size_t i = 0; i < lanes.size(); ++i)
      cleared.push_back({lanes[i].handler, lanes[i].lane, epochs[i]});
  }

  // Conditional writes: the mode, the lane writes that find the lane changed meanwhile,
  // and what clear_lost was told.
  LaneConcurrency mode = LaneConcurrency::kLocks;
  std::set<std::pair<std::string, std::int16_t>> refused_writes;
  std::map<std::pair<std::string, std::int16_t>, int> refused_from;  // from the n-th write on
  std::map<std::pair<std::string, std::int16_t>, int> writes_seen;
  struct Cleared {
    std::string handler;
    std::int16_t lane;
    std::int64_t epoch;
  };
  std::vector<Cleared> cleared;

  const LaneUpdate* update_of(const std::string& handler, std::int16_t lane) const {
    for (const auto& u : updates)
      if (u.handler == handler && u.lane == lane) return &u;
    return nullptr;
  }
};

constexpr bool kWithHolder = true;
constexpr bool kWithoutHolder = false;

LaneSnapshot Snapshot(std::string handler, std::int16_t lane, std::int64_t epoch,
                      Names in_flight = {}) {
  return {std::move(handler), lane, epoch, std::move(in_flight)};
}

// A lane bound to the caller's own holder (the caller passes a holder).
HeldLane Own(LaneSnapshot lane, Names keys = {}) {
  HeldLane h;
  h.lane = std::move(lane);
  h.binding.to_holder = true;
  h.binding.same_holder = true;
  h.in_flight_keys = std::move(keys);
  return h;
}

// Bound to another holder of the caller's worker name.
HeldLane OtherHolders(LaneSnapshot lane, bool expired) {
  HeldLane h;
  h.lane = std::move(lane);
  h.binding.to_holder = true;
  h.binding.same_holder = false;
  h.binding.lease_expired = expired;
  return h;
}

// Bound to a backend that is gone.
HeldLane Orphan(LaneSnapshot lane) {
  HeldLane h;
  h.lane = std::move(lane);
  h.binding.to_holder = false;
  h.binding.backend_alive = false;
  return h;
}

AcquiredLane Acquired(LaneSnapshot lane, bool had_owner, std::size_t position) {
  return {std::move(lane), had_owner, position};
}

CandidateRow Row(std::size_t lane_index, std::string id, std::optional<std::string> key = {},
                 std::int32_t claims = 0, std::int32_t attempts = 0) {
  CandidateRow r;
  r.lane_index = lane_index;
  r.event_id = std::move(id);
  r.key = std::move(key);
  r.claims = claims;
  r.attempts = attempts;
  return r;
}

std::vector<LaneRef> Lanes(const std::string& handler, int n) {
  std::vector<LaneRef> out;
  for (int i = 0; i < n; ++i) out.push_back({handler, static_cast<std::int16_t>(i)});
  return out;
}

Names Ids(const std::vector<ClaimedDelivery>& claimed) {
  Names out;
  for (const auto& c : claimed) out.push_back(c.token.event_id);
  return out;
}

Names sorted(Names names) {
  std::sort(names.begin(), names.end());
  return names;
}

Names Sequential(const std::string& prefix, int n) {
  Names out;
  for (int i = 0; i < n; ++i) out.push_back(prefix + std::to_string(i));
  return out;
}

// ---------------------------------------------------------------- the order of the steps

TEST(ClaimProtocolTest, StepsRunInTheOneRightOrder) {
  ScriptedStore store;
  store.held = {Own(Snapshot("h", 1, 5)), Orphan(Snapshot("h", 2, 9))};
  store.takeover = {Snapshot("h", 2, 9, {"lost"})};
  store.attempts = {{"lost", 0}};
  store.rows.push_back({Row(0, "kept-1")});
  store.work = Lanes("h", 2);
  store.work[0].lane = 10;
  store.work[1].lane = 11;
  store.acquirable.push_back({Acquired(Snapshot("h", 10, 0), false, 1)});
  store.rows.push_back({Row(0, "acquired-1")});

  const auto claimed = run_claim(store, std::nullopt, 10, kWithHolder);

  EXPECT_EQ(store.calls, (Names{"subscribed_handlers", "held_lanes", "lock_for_takeover",
                                "lock_lost", "write_charges", "candidates", "lanes_with_work",
                                "lock_acquirable", "candidates", "write_lanes"}));
  EXPECT_EQ(Ids(claimed), (Names{"kept-1", "acquired-1"}));
}

TEST(ClaimProtocolTest, EveryAcquisitionRoundLocksThenAsksForCandidates) {
  ScriptedStore store;
  store.work = Lanes("h", 40);
  // Round 0 gets all 4 it wants, one of them an expired lease.
  store.acquirable.push_back(
      {Acquired(Snapshot("h", 0, 0), false, 1), Acquired(Snapshot("h", 1, 0, {"x"}), true, 2),
       Acquired(Snapshot("h", 2, 0), false, 3), Acquired(Snapshot("h", 3, 0), false, 4)});
  store.attempts = {{"x", 0}};
  store.rows.push_back({Row(0, "a")});
  // Round 1 gets one free lane (its candidates are asked for); round 2 gets none.
  store.acquirable.push_back({Acquired(Snapshot("h", 4, 0), false, 1)});
  store.rows.push_back({Row(0, "b")});

  run_claim(store, std::nullopt, 10, kWithHolder);

  EXPECT_EQ(store.calls,
            (Names{"subscribed_handlers", "held_lanes", "lanes_with_work", "lock_acquirable",
                   "lock_lost", "write_charges", "candidates", "lock_acquirable", "candidates",
                   "lock_acquirable", "write_lanes"}));
}

TEST(ClaimProtocolTest, NoTakeoverCallsWhenNothingIsTakenOver) {
  ScriptedStore store;
  store.held = {Own(Snapshot("h", 1, 5, {"running"}))};
  store.rows.push_back({Row(0, "a")});
  run_claim(store, std::nullopt, 10, kWithHolder);
  EXPECT_EQ(std::count(store.calls.begin(), store.calls.end(), "lock_for_takeover"), 0);
  EXPECT_EQ(std::count(store.calls.begin(), store.calls.end(), "lock_lost"), 0);
  EXPECT_EQ(std::count(store.calls.begin(), store.calls.end(), "write_charges"), 0);
}

TEST(ClaimProtocolTest, ATakeoverOfALaneRunningNothingChargesNothing) {
  ScriptedStore store;
  store.held = {Orphan(Snapshot("h", 2, 9))};
  store.takeover = {Snapshot("h", 2, 9)};
  run_claim(store, std::nullopt, 10, kWithoutHolder);
  EXPECT_EQ(store.calls, (Names{"subscribed_handlers", "held_lanes", "lock_for_takeover",
                                "candidates", "lanes_with_work", "write_lanes"}));
}

TEST(ClaimProtocolTest, LostDeliveriesAlreadyEndedAreNotCharged) {
  // lock_lost finds none of them pending any more: nothing to write.
  ScriptedStore store;
  store.held = {Orphan(Snapshot("h", 2, 9))};
  store.takeover = {Snapshot("h", 2, 9, {"done"})};
  run_claim(store, std::nullopt, 10, kWithoutHolder);
  EXPECT_EQ(store.lost_asked.size(), 1u);
  EXPECT_EQ(std::count(store.calls.begin(), store.calls.end(), "write_charges"), 0);
}

TEST(ClaimProtocolTest, ABatchFilledFromHeldLanesLooksForNoOtherWork) {
  ScriptedStore store;
  store.held = {Own(Snapshot("h", 1, 5))};
  store.rows.push_back({Row(0, "a"), Row(0, "b")});
  store.work = Lanes("h", 3);

  const auto claimed = run_claim(store, std::nullopt, 2, kWithHolder);

  EXPECT_EQ(Ids(claimed), (Names{"a", "b"}));
  EXPECT_EQ(store.calls, (Names{"subscribed_handlers", "held_lanes", "candidates", "write_lanes"}));
}

TEST(ClaimProtocolTest, NoSubscribedHandlersIsAnEmptyClaimThatTouchesNothing) {
  ScriptedStore store;
  store.subscribed = {};
  store.held = {Own(Snapshot("h", 1, 5))};
  EXPECT_TRUE(run_claim(store, std::nullopt, 10, kWithHolder).empty());
  EXPECT_EQ(store.calls, (Names{"subscribed_handlers"}));
}

// ---------------------------------------------------------------- the handlers

TEST(ClaimProtocolTest, ARequestedHandlerNotSubscribedIsUndefined) {
  ScriptedStore store;
  store.subscribed = {"a", "b"};
  try {
    run_claim(store, Names{"a", "nope"}, 10, kWithHolder);
    FAIL() << "did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUndefinedObject);
    EXPECT_NE(std::string(e.what()).find("nope"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("subscribe"), std::string::npos) << e.hint();
    EXPECT_NE(e.hint().find("nope"), std::string::npos) << e.hint();
  }
  EXPECT_EQ(store.calls, (Names{"subscribed_handlers"})) << "no lane is touched";
}

TEST(ClaimProtocolTest, RequestedHandlersThatAreSubscribedAreClaimed) {
  ScriptedStore store;
  store.subscribed = {"a", "b", "c"};
  store.held = {Own(Snapshot("b", 1, 5))};
  store.rows.push_back({Row(0, "x")});
  const auto claimed = run_claim(store, Names{"b"}, 10, kWithHolder);
  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_EQ(claimed[0].token.handler, "b");
}

TEST(ClaimProtocolTest, APausedHandlerAskedForIsNoErrorAndTouchesNoLane) {
  ScriptedStore store;
  store.subscribed = {"a", "b"};
  store.paused = {"a"};
  store.held = {Own(Snapshot("a", 1, 5))};
  store.rows.push_back({Row(0, "x")});
  EXPECT_TRUE(run_claim(store, Names{"a"}, 10, kWithHolder).empty());
  EXPECT_EQ(store.calls, (Names{"subscribed_handlers"})) << "no lane is touched";
}

TEST(ClaimProtocolTest, PausedHandlersAreLeftOutOfEveryLaneStep) {
  ScriptedStore store;
  store.subscribed = {"a", "b", "c"};
  store.paused = {"b"};
  store.work = {};
  run_claim(store, std::nullopt, 10, kWithHolder);
  ASSERT_EQ(store.held_asked.size(), 1u);
  EXPECT_EQ(store.held_asked[0], (Names{"a", "c"}));
  run_claim(store, Names{"b", "c"}, 10, kWithHolder);
  ASSERT_EQ(store.held_asked.size(), 2u);
  EXPECT_EQ(store.held_asked[1], (Names{"c"}));
}

TEST(ClaimProtocolTest, AnEmptyRequestedNameIsInvalidBeforeTheStoreIsAsked) {
  ScriptedStore store;
  EXPECT_TRUE(ThrowsInvalidParameter([&] { run_claim(store, Names{"h", ""}, 10, kWithHolder); }));
  EXPECT_TRUE(store.calls.empty());
}

TEST(ClaimProtocolTest, AnOverlongRequestedNameIsInvalid) {
  ScriptedStore store;
  const std::string long_name(kMaxNameLength + 1, 'x');
  store.subscribed = {long_name};
  EXPECT_TRUE(ThrowsInvalidParameter([&] { run_claim(store, Names{long_name}, 10, kWithHolder); }));
  EXPECT_TRUE(store.calls.empty());
}

// ---------------------------------------------------------------- held lanes

TEST(ClaimProtocolTest, AKeptLanesInFlightDeliveriesAreExcludedAndCountAgainstItsRoom) {
  ScriptedStore store;
  store.held = {Own(Snapshot("h", 1, 5, {"r1", "r2"}))};
  store.rows.push_back({Row(0, "n1")});

  run_claim(store, std::nullopt, 10, kWithHolder);

  ASSERT_GE(store.candidate_calls.size(), 1u);
  const CandidatesCall& call = store.candidate_calls[0];
  EXPECT_EQ(call.limit, 10);
  ASSERT_EQ(call.lanes.size(), 1u);
  EXPECT_EQ(call.lanes[0].lane, 1);
  EXPECT_EQ(call.lanes[0].excluded, (Names{"r1", "r2"}));
  EXPECT_EQ(call.lanes[0].room, kMaxInFlightPerLane - 2);

  const LaneUpdate* u = store.update_of("h", 1);
  ASSERT_NE(u, nullptr);
  EXPECT_TRUE(u->write.hold);
  EXPECT_FALSE(u->write.new_holder) << "kept, not changing hands";
  EXPECT_EQ(u->write.epoch, 5);
  EXPECT_EQ(u->in_flight, (Names{"r1", "r2", "n1"}));
}

TEST(ClaimProtocolTest, AKeptLaneTakesNoMoreThanItsRoom) {
  ScriptedStore store;
  store.held = {Own(Snapshot("h", 1, 5, Sequential("r", kMaxInFlightPerLane - 1)))};
  // A store that ignores the room: the planner still refuses the second.
  store.rows.push_back({Row(0, "n1"), Row(0, "n2")});

  const auto claimed = run_claim(store, std::nullopt, 10, kWithHolder);

  EXPECT_EQ(store.candidate_calls[0].lanes[0].room, 1);
  EXPECT_EQ(Ids(claimed), (Names{"n1"}));
}

TEST(ClaimProtocolTest, AKeptLaneInFlightKeyBlocksCandidatesOfThatKey) {
  ScriptedStore store;
  store.held = {Own(Snapshot("h", 1, 5, {"r1"}), {"k"}), Own(Snapshot("g", 1, 5))};
  store.subscribed = {"g", "h"};
  store.rows.push_back({Row(0, "same-key", "k"), Row(0, "other-key", "j"), Row(0, "unkeyed"),
                        Row(1, "other-handler-same-key", "k")});

  const auto claimed = run_claim(store, std::nullopt, 10, kWithHolder);

  EXPECT_EQ(Ids(claimed), (Names{"other-key", "unkeyed", "other-handler-same-key"}));
}

TEST(ClaimProtocolTest, AnotherLiveIncarnationsLaneIsLeftAlone) {
  ScriptedStore store;
  store.held = {OtherHolders(Snapshot("h", 1, 5, {"theirs"}), /*expired=*/false)};
  store.work = {};

  const auto claimed = run_claim(store, std::nullopt, 10, kWithHolder);

  EXPECT_TRUE(claimed.empty());
  EXPECT_TRUE(store.takeover_asked.empty());
  EXPECT_TRUE(store.candidate_calls.empty()) << "its deliveries are not read";
  EXPECT_TRUE(store.updates.empty()) << "nor is it written";
  EXPECT_EQ(store.calls, (Names{"subscribed_handlers", "held_lanes", "lanes_with_work"}));
}

TEST(ClaimProtocolTest, ALiveBackendsLaneIsAnotherIncarnationsForAHolder) {
  // The caller passes a holder; the lane is bound to a live backend of its worker name.
  ScriptedStore store;
  HeldLane h;
  h.lane = Snapshot("h", 1, 5, {"theirs"});
  h.binding.backend_alive = true;
  store.held = {h};
  store.held.push_back(Own(Snapshot("h", 2, 3)));
  store.rows.push_back({Row(0, "mine")});

  run_claim(store, std::nullopt, 10, kWithHolder);

  ASSERT_EQ(store.candidate_calls.size(), 1u);
  ASSERT_EQ(store.candidate_calls[0].lanes.size(), 1u);
  EXPECT_EQ(store.candidate_calls[0].lanes[0].lane, 2);
  EXPECT_EQ(store.update_of("h", 1), nullptr);
  EXPECT_TRUE(store.takeover_asked.empty());
}

TEST(ClaimProtocolTest, AnOrphanIsTakenOverAndItsInFlightChargedWithoutBackoff) {
  ScriptedStore store;
  store.held = {Orphan(Snapshot("h", 2, 9, {"stale"}))};
  // Re-read after the lock: the in-flight list as it is now.
  store.takeover = {Snapshot("h", 2, 9, {"x", "y"})};
  store.policy = RetryPolicy{3, 1'000'000, 3'600'000'000};
  store.attempts = {{"x", 2}, {"y", 0}};
  // After the charge, y is pending again and due as it was.
  store.rows.push_back({Row(0, "y", std::nullopt, /*claims=*/4, /*attempts=*/1)});

  const auto claimed = run_claim(store, std::nullopt, 10, kWithoutHolder);

  ASSERT_EQ(store.takeover_asked.size(), 1u);
  EXPECT_EQ(store.takeover_asked[0].handler, "h");
  EXPECT_EQ(store.takeover_asked[0].lane, 2);
  ASSERT_EQ(store.lost_asked.size(), 2u) << "what lock_for_takeover re-read, not held_lanes";
  EXPECT_EQ(store.lost_asked[0].event_id, "x");
  EXPECT_EQ(store.lost_asked[1].event_id, "y");
  ASSERT_EQ(store.charges.size(), 2u);
  EXPECT_EQ(store.charges[0].event_id, "x");
  EXPECT_EQ(store.charges[0].attempts, 3);
  EXPECT_TRUE(store.charges[0].dead) << "dead at max_attempts";
  EXPECT_EQ(store.charges[1].event_id, "y");
  EXPECT_EQ(store.charges[1].attempts, 1);
  EXPECT_FALSE(store.charges[1].dead);

  ASSERT_EQ(store.candidate_calls.size(), 1u);
  EXPECT_TRUE(store.candidate_calls[0].lanes[0].excluded.empty())
      << "a lane taken over runs none of its old deliveries";
  EXPECT_EQ(store.candidate_calls[0].lanes[0].room, kMaxInFlightPerLane);

  const LaneUpdate* u = store.update_of("h", 2);
  ASSERT_NE(u, nullptr);
  EXPECT_TRUE(u->write.write);
  EXPECT_TRUE(u->write.hold);
  EXPECT_TRUE(u->write.new_holder);
  EXPECT_EQ(u->write.epoch, 10);
  EXPECT_EQ(u->in_flight, (Names{"y"}));

  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_EQ(claimed[0].token.epoch, 10);
  EXPECT_EQ(claimed[0].token.claims, 4);
  EXPECT_EQ(claimed[0].token.lane, 2);
  EXPECT_EQ(claimed[0].attempts, 1);
}

TEST(ClaimProtocolTest, AnotherHoldersExpiredLaneIsTakenOverEvenWithNothingToRun) {
  ScriptedStore store;
  store.held = {OtherHolders(Snapshot("h", 4, 20, {"z"}), /*expired=*/true)};
  store.takeover = {Snapshot("h", 4, 20, {"z"})};
  store.attempts = {{"z", 0}};

  const auto claimed = run_claim(store, std::nullopt, 10, kWithHolder);

  EXPECT_TRUE(claimed.empty());
  ASSERT_EQ(store.charges.size(), 1u);
  EXPECT_EQ(store.charges[0].attempts, 1);
  const LaneUpdate* u = store.update_of("h", 4);
  ASSERT_NE(u, nullptr) << "the takeover itself is written";
  EXPECT_FALSE(u->write.hold) << "and, running nothing, handed back";
  EXPECT_EQ(u->write.epoch, 21) << "the old holder's tokens are fenced";
  EXPECT_TRUE(u->in_flight.empty());
}

TEST(ClaimProtocolTest, ALaneTheTakeoverLockDidNotGetIsNotWritten) {
  // lock_for_takeover re-reads only the lanes it could lock (a completion pinned the other).
  ScriptedStore store;
  store.held = {Orphan(Snapshot("h", 1, 3, {"a"})), Orphan(Snapshot("h", 2, 3, {"b"}))};
  store.takeover = {Snapshot("h", 2, 3, {"b"})};
  store.attempts = {{"a", 0}, {"b", 0}};

  run_claim(store, std::nullopt, 10, kWithoutHolder);

  ASSERT_EQ(store.lost_asked.size(), 1u);
  EXPECT_EQ(store.lost_asked[0].event_id, "b");
  EXPECT_EQ(store.update_of("h", 1), nullptr);
  ASSERT_NE(store.update_of("h", 2), nullptr);
}

TEST(ClaimProtocolTest, ChargesForAreLostAttemptsUnderTheClampedPolicy) {
  const RetryPolicy zero{0, 1000, 2000};
  const auto charges = charges_for({{"h", "a", 0, zero},
                                    {"h", "b", 3, RetryPolicy{5, 1000, 2000}},
                                    {"h", "c", 4, RetryPolicy{5, 1000, 2000}}});
  ASSERT_EQ(charges.size(), 3u);
  EXPECT_EQ(charges[0].attempts, 1);
  EXPECT_TRUE(charges[0].dead) << "max_attempts 0 behaves as 1";
  EXPECT_EQ(charges[1].attempts, 4);
  EXPECT_FALSE(charges[1].dead);
  EXPECT_EQ(charges[2].attempts, 5);
  EXPECT_TRUE(charges[2].dead);
  EXPECT_EQ(charges[2].handler, "h");
  EXPECT_EQ(charges[2].event_id, "c");
}

// ---------------------------------------------------------------- acquisition rounds

TEST(ClaimProtocolTest, RoundsWantFourEightSixteenInWindowsOfFourTimesThat) {
  ScriptedStore store;
  store.work = Lanes("h", 40);
  // Round 0 takes 4 of window [0, 16), the last at position 6: round 1 starts at 6.
  store.acquirable.push_back(
      {Acquired(Snapshot("h", 0, 0), false, 1), Acquired(Snapshot("h", 1, 0), false, 2),
       Acquired(Snapshot("h", 4, 0), false, 5), Acquired(Snapshot("h", 5, 0), false, 6)});
  store.rows.push_back({Row(0, "a"), Row(1, "b"), Row(2, "c"), Row(3, "d")});
  // Round 1 takes 8 of window [6, 38), the last at position 10: round 2 starts at 16.
  std::vector<AcquiredLane> round1;
  for (int p = 1; p <= 10; ++p)
    if (p != 3 && p != 7) round1.push_back(Acquired(Snapshot("h", 5 + p, 0), false, p));
  store.acquirable.push_back(round1);
  // Round 2 wants 16 of [16, 40) and falls short: the list is done.
  store.acquirable.push_back({Acquired(Snapshot("h", 16, 0), false, 1)});

  run_claim(store, std::nullopt, 100, kWithHolder);

  ASSERT_EQ(store.acquire_calls.size(), 3u);
  EXPECT_EQ(store.acquire_calls[0].wanted, 4);
  ASSERT_EQ(store.acquire_calls[0].window.size(), 16u);
  EXPECT_EQ(store.acquire_calls[0].window.front().second, 0);
  EXPECT_EQ(store.acquire_calls[1].wanted, 8);
  ASSERT_EQ(store.acquire_calls[1].window.size(), 32u);
  EXPECT_EQ(store.acquire_calls[1].window.front().second, 6);
  EXPECT_EQ(store.acquire_calls[2].wanted, 16);
  ASSERT_EQ(store.acquire_calls[2].window.size(), 24u) << "capped by the list";
  EXPECT_EQ(store.acquire_calls[2].window.front().second, 16);
  // The limits follow what the batch still has room for.
  ASSERT_EQ(store.candidate_calls.size(), 3u);
  EXPECT_EQ(store.candidate_calls[0].limit, 100);
  EXPECT_EQ(store.candidate_calls[1].limit, 96);
  EXPECT_EQ(store.candidate_calls[0].lanes.size(), 4u) << "only the lanes of the round";
  EXPECT_EQ(store.candidate_calls[1].lanes.size(), 8u);
}

TEST(ClaimProtocolTest, ARoundWantsNoMoreLanesThanTheBatchHasRoomFor) {
  ScriptedStore store;
  store.work = Lanes("h", 40);
  store.acquirable.push_back(
      {Acquired(Snapshot("h", 0, 0), false, 1), Acquired(Snapshot("h", 1, 0), false, 2),
       Acquired(Snapshot("h", 2, 0), false, 3), Acquired(Snapshot("h", 3, 0), false, 4)});
  store.rows.push_back({Row(0, "a"), Row(1, "b"), Row(2, "c"), Row(3, "d")});

  run_claim(store, std::nullopt, 6, kWithHolder);

  // Round 1 wants 2 (not 8) from [4, 12); it gets none, so the rounds after it walk the
  // rest of the list, each wanting 2 from a window of 8.
  ASSERT_EQ(store.acquire_calls.size(), 6u);
  EXPECT_EQ(store.acquire_calls[1].wanted, 2);
  EXPECT_EQ(store.acquire_calls[1].window.size(), 8u);
  EXPECT_EQ(store.acquire_calls[1].window.front().second, 4);
  for (std::size_t i = 2; i < store.acquire_calls.size(); ++i) {
    EXPECT_EQ(store.acquire_calls[i].wanted, 2) << "round " << i;
    EXPECT_EQ(store.acquire_calls[i].window.front().second, 4 + 8 * (i - 1)) << "round " << i;
  }
  EXPECT_EQ(store.acquire_calls.back().window.size(), 4u) << "[36, 40)";
}

TEST(ClaimProtocolTest, ARoundThatGetsNothingMovesPastItsWindow) {
  ScriptedStore store;
  store.work = Lanes("h", 20);
  run_claim(store, std::nullopt, 100, kWithHolder);
  ASSERT_EQ(store.acquire_calls.size(), 2u);
  EXPECT_EQ(store.acquire_calls[0].window.size(), 16u);
  EXPECT_EQ(store.acquire_calls[1].wanted, 8);
  ASSERT_EQ(store.acquire_calls[1].window.size(), 4u);
  EXPECT_EQ(store.acquire_calls[1].window.front().second, 16);
  EXPECT_TRUE(store.candidate_calls.empty());
}

TEST(ClaimProtocolTest, AcquisitionStopsOnceTheBatchIsFull) {
  ScriptedStore store;
  store.work = Lanes("h", 40);
  store.acquirable.push_back(
      {Acquired(Snapshot("h", 0, 0), false, 1), Acquired(Snapshot("h", 1, 0), false, 2),
       Acquired(Snapshot("h", 2, 0), false, 3), Acquired(Snapshot("h", 3, 0), false, 4)});
  store.rows.push_back({Row(0, "a"), Row(1, "b"), Row(2, "c")});
  const auto claimed = run_claim(store, std::nullopt, 3, kWithHolder);
  EXPECT_EQ(claimed.size(), 3u);
  EXPECT_EQ(store.acquire_calls.size(), 1u);
}

TEST(ClaimProtocolTest, AFreeLanesStaleInFlightListIsIgnored) {
  ScriptedStore store;
  store.work = Lanes("h", 1);
  store.acquirable.push_back({Acquired(Snapshot("h", 0, 7, {"old1", "old2"}), false, 1)});
  store.attempts = {{"old1", 0}, {"old2", 0}};  // would be charged if it were asked
  store.rows.push_back({Row(0, "n")});

  run_claim(store, std::nullopt, 10, kWithHolder);

  EXPECT_TRUE(store.lost_asked.empty()) << "nothing of a free lane runs: nothing is lost";
  EXPECT_TRUE(store.charges.empty());
  ASSERT_EQ(store.candidate_calls.size(), 1u);
  EXPECT_TRUE(store.candidate_calls[0].lanes[0].excluded.empty());
  EXPECT_EQ(store.candidate_calls[0].lanes[0].room, kMaxInFlightPerLane);
  const LaneUpdate* u = store.update_of("h", 0);
  ASSERT_NE(u, nullptr);
  EXPECT_EQ(u->in_flight, (Names{"n"}));
  EXPECT_EQ(u->write.epoch, 8);
  EXPECT_TRUE(u->write.new_holder);
}

TEST(ClaimProtocolTest, AnExpiredLanesInFlightIsChargedBeforeItsCandidatesAreRead) {
  ScriptedStore store;
  store.work = Lanes("h", 1);
  store.acquirable.push_back({Acquired(Snapshot("h", 0, 7, {"e"}), true, 1)});
  store.attempts = {{"e", 4}};
  store.rows.push_back({Row(0, "e", std::nullopt, 2, 5)});

  const auto claimed = run_claim(store, std::nullopt, 10, kWithHolder);

  ASSERT_EQ(store.lost_asked.size(), 1u);
  EXPECT_EQ(store.lost_asked[0].event_id, "e");
  ASSERT_EQ(store.charges.size(), 1u);
  EXPECT_EQ(store.charges[0].attempts, 5);
  EXPECT_TRUE(store.candidate_calls[0].lanes[0].excluded.empty());
  const LaneUpdate* u = store.update_of("h", 0);
  ASSERT_NE(u, nullptr);
  EXPECT_EQ(u->write.epoch, 8);
  EXPECT_TRUE(u->write.hold);
  EXPECT_EQ(u->in_flight, (Names{"e"}));
  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_EQ(claimed[0].token.epoch, 8);
}

TEST(ClaimProtocolTest, AnExpiredLaneThatYieldsNothingIsStillWrittenAndHandedBack) {
  ScriptedStore store;
  store.work = Lanes("h", 1);
  store.acquirable.push_back({Acquired(Snapshot("h", 0, 7, {"e"}), true, 1)});
  store.attempts = {{"e", 0}};
  run_claim(store, std::nullopt, 10, kWithHolder);
  const LaneUpdate* u = store.update_of("h", 0);
  ASSERT_NE(u, nullptr);
  EXPECT_FALSE(u->write.hold);
  EXPECT_EQ(u->write.epoch, 8);
}

// ---------------------------------------------------------------- lane writes and tokens

TEST(ClaimProtocolTest, AHeldLaneRunningNothingThatGotNothingIsHandedBack) {
  ScriptedStore store;
  store.held = {Own(Snapshot("h", 1, 5))};
  run_claim(store, std::nullopt, 10, kWithHolder);
  const LaneUpdate* u = store.update_of("h", 1);
  ASSERT_NE(u, nullptr);
  EXPECT_TRUE(u->write.write);
  EXPECT_FALSE(u->write.hold);
  EXPECT_EQ(u->write.epoch, 5) << "handing back does not fence anything";
}

TEST(ClaimProtocolTest, AHeldLaneStillRunningThatGotNothingIsNotWritten) {
  ScriptedStore store;
  store.held = {Own(Snapshot("h", 1, 5, {"r"}))};
  run_claim(store, std::nullopt, 10, kWithHolder);
  EXPECT_EQ(store.update_of("h", 1), nullptr);
  EXPECT_EQ(std::count(store.calls.begin(), store.calls.end(), "write_lanes"), 0);
}

TEST(ClaimProtocolTest, AFreeLaneThatGotNothingIsNotWritten) {
  ScriptedStore store;
  store.work = Lanes("h", 2);
  store.acquirable.push_back(
      {Acquired(Snapshot("h", 0, 3), false, 1), Acquired(Snapshot("h", 1, 3), false, 2)});
  store.rows.push_back({Row(1, "b")});
  run_claim(store, std::nullopt, 10, kWithHolder);
  EXPECT_EQ(store.update_of("h", 0), nullptr);
  ASSERT_NE(store.update_of("h", 1), nullptr);
  EXPECT_EQ(store.updates.size(), 1u);
}

TEST(ClaimProtocolTest, NothingAcquiredAndNothingHeldWritesNothing) {
  ScriptedStore store;
  store.work = Lanes("h", 1);
  store.acquirable.push_back({Acquired(Snapshot("h", 0, 3), false, 1)});
  EXPECT_TRUE(run_claim(store, std::nullopt, 10, kWithHolder).empty());
  EXPECT_EQ(std::count(store.calls.begin(), store.calls.end(), "write_lanes"), 0);
}

TEST(ClaimProtocolTest, TokensCarryTheWrittenEpochAndTheCandidatesClaimsCounter) {
  ScriptedStore store;
  store.held = {Own(Snapshot("h", 1, 5))};
  store.rows.push_back({Row(0, "kept", "k1", /*claims=*/9, /*attempts=*/2)});
  store.work = {{"h", 7}};
  store.acquirable.push_back({Acquired(Snapshot("h", 7, 41), false, 1)});
  store.rows.push_back({Row(0, "fresh", std::nullopt, /*claims=*/0, /*attempts=*/0)});

  const auto claimed = run_claim(store, std::nullopt, 10, kWithHolder);

  ASSERT_EQ(claimed.size(), 2u);
  EXPECT_EQ(claimed[0].token.lane, 1);
  EXPECT_EQ(claimed[0].token.epoch, 5) << "kept: the epoch stays";
  EXPECT_EQ(claimed[0].token.claims, 9);
  EXPECT_EQ(claimed[0].token.handler, "h");
  EXPECT_EQ(claimed[0].key, std::optional<std::string>("k1"));
  EXPECT_EQ(claimed[0].attempts, 2);
  EXPECT_EQ(claimed[1].token.lane, 7);
  EXPECT_EQ(claimed[1].token.epoch, 42) << "acquired: the epoch moved";
  EXPECT_EQ(claimed[1].token.claims, 0);
  EXPECT_EQ(claimed[1].key, std::nullopt);
  for (const auto& c : claimed) {
    const LaneUpdate* u = store.update_of(c.token.handler, c.token.lane);
    ASSERT_NE(u, nullptr);
    EXPECT_EQ(u->write.epoch, c.token.epoch);
  }
}

// ---------------------------------------------------------------- per-key order

TEST(ClaimProtocolTest, OnlyTheFirstOfOneKeyIsTakenIntoABatch) {
  ScriptedStore store;
  store.held = {Own(Snapshot("h", 1, 5))};
  store.rows.push_back({Row(0, "k-first", "k"), Row(0, "k-second", "k"), Row(0, "j", "j")});

  const auto claimed = run_claim(store, std::nullopt, 10, kWithHolder);

  EXPECT_EQ(Ids(claimed), (Names{"k-first", "j"}));
  EXPECT_EQ(store.update_of("h", 1)->in_flight, (Names{"k-first", "j"}));
}

TEST(ClaimProtocolTest, OneKeyAcrossAcquisitionRoundsIsStillTakenOnce) {
  ScriptedStore store;
  store.held = {Own(Snapshot("h", 1, 5))};
  store.rows.push_back({Row(0, "held-k", "k")});
  store.work = {{"h", 2}};
  store.acquirable.push_back({Acquired(Snapshot("h", 2, 0), false, 1)});
  store.rows.push_back({Row(0, "acquired-k", "k")});

  const auto claimed = run_claim(store, std::nullopt, 10, kWithHolder);

  EXPECT_EQ(Ids(claimed), (Names{"held-k"}));
  EXPECT_EQ(store.update_of("h", 2), nullptr) << "a free lane with no pick is not acquired";
}

TEST(ClaimProtocolTest, ACandidateWithAPendingPredecessorIsRefused) {
  ScriptedStore store;
  store.held = {Own(Snapshot("h", 1, 5))};
  CandidateRow behind = Row(0, "behind", "k");
  behind.has_pending_predecessor = true;
  store.rows.push_back({behind, Row(0, "free", "j")});

  const auto claimed = run_claim(store, std::nullopt, 10, kWithHolder);

  EXPECT_EQ(Ids(claimed), (Names{"free"}));
}

TEST(ClaimProtocolTest, ARefusedCandidateLeavesItsPlaceInTheBatch) {
  // batch 1: the refused first row must not use up the one place.
  ScriptedStore store;
  store.held = {Own(Snapshot("h", 1, 5), {"k"})};
  store.rows.push_back({Row(0, "blocked", "k"), Row(0, "ok", "j")});
  const auto claimed = run_claim(store, std::nullopt, 1, kWithHolder);
  EXPECT_EQ(Ids(claimed), (Names{"ok"}));
}

TEST(ClaimProtocolTest, ARoundWithARefusalAsksAgainWithoutTheRefusedAndForTwiceAsMany) {
  // A store honours the limit: with one place left, the refused head was all it returned.
  ScriptedStore store;
  store.held = {Own(Snapshot("h", 1, 5, {"running"}), {"k"})};
  store.rows.push_back({Row(0, "requeued-head", "k")});
  store.rows.push_back({Row(0, "ok", "j")});

  const auto claimed = run_claim(store, std::nullopt, 1, kWithHolder);

  EXPECT_EQ(Ids(claimed), (Names{"ok"}));
  ASSERT_EQ(store.candidate_calls.size(), 2u);
  EXPECT_EQ(store.candidate_calls[0].limit, 1);
  EXPECT_EQ(store.candidate_calls[1].limit, 2);
  EXPECT_EQ(store.candidate_calls[1].lanes[0].excluded, (Names{"running", "requeued-head"}));
  EXPECT_EQ(store.candidate_calls[1].lanes[0].room, 31 + 2)
      << "the room (a refused row takes none), widened by twice the refusals";
}

TEST(ClaimProtocolTest, ALaneWhoseHeadsAreRefusedIsReadFurtherEachRound) {
  // 31 in flight: room for one. Its reads show refused heads, one, then three, then a
  // head and the delivery that can run.
  Names running = Sequential("running", 31);
  ScriptedStore store;
  store.held = {Own(Snapshot("h", 1, 5, running), {"k"})};
  store.rows.push_back({Row(0, "head0", "k")});
  store.rows.push_back({Row(0, "head1", "k"), Row(0, "head2", "k"), Row(0, "head3", "k")});
  store.rows.push_back({Row(0, "head4", "k"), Row(0, "ok", "j")});

  const auto claimed = run_claim(store, std::nullopt, 1, kWithHolder);

  EXPECT_EQ(Ids(claimed), (Names{"ok"}));
  ASSERT_EQ(store.candidate_calls.size(), 3u);
  EXPECT_EQ(store.candidate_calls[0].lanes[0].room, 1);
  EXPECT_EQ(store.candidate_calls[1].lanes[0].room, 1 + 2);
  EXPECT_EQ(store.candidate_calls[2].lanes[0].room, 1 + 6);
  Names excluded = running;
  for (const auto& id : {"head0", "head1", "head2", "head3"}) excluded.push_back(id);
  EXPECT_EQ(store.candidate_calls[2].lanes[0].excluded, excluded);
}

TEST(ClaimProtocolTest, ARowBeyondALanesRoomIsNoRefusal) {
  // A lane that fills up is done for this claim: it is not read again.
  ScriptedStore store;
  store.held = {Own(Snapshot("h", 1, 5, Sequential("running", 31)))};
  store.rows.push_back({Row(0, "fits"), Row(0, "beyond")});

  const auto claimed = run_claim(store, std::nullopt, 10, kWithHolder);

  EXPECT_EQ(Ids(claimed), (Names{"fits"}));
  EXPECT_EQ(store.candidate_calls.size(), 1u);
}

TEST(ClaimProtocolTest, ARoundWithoutARefusalIsTheLast) {
  ScriptedStore store;
  store.held = {Own(Snapshot("h", 1, 5))};
  store.rows.push_back({Row(0, "a"), Row(0, "b")});  // fewer than asked: the lane ran dry

  const auto claimed = run_claim(store, std::nullopt, 10, kWithHolder);

  EXPECT_EQ(Ids(claimed), (Names{"a", "b"}));
  EXPECT_EQ(store.candidate_calls.size(), 1u) << "a second round of the held lanes";
  EXPECT_EQ(store.calls, (Names{"subscribed_handlers", "held_lanes", "candidates",
                                "lanes_with_work", "write_lanes"}));
}

TEST(ClaimProtocolTest, ManyRefusedHeadsCostFewRoundsAndTheRoundsAreBounded) {
  // A store that keeps answering refused heads (as one that ignored the exclusions would)
  // is asked a bounded number of times; the limit doubles each time.
  ScriptedStore store;
  store.held = {Own(Snapshot("h", 1, 5, {"running"}), {"k"})};
  for (int i = 0; i < 100; ++i) store.rows.push_back({Row(0, "head" + std::to_string(i), "k")});

  const auto claimed = run_claim(store, std::nullopt, 1, kWithHolder);

  EXPECT_TRUE(claimed.empty());
  ASSERT_GE(store.candidate_calls.size(), 10u);
  EXPECT_LE(store.candidate_calls.size(), 30u) << "a round per refused head";
  for (std::size_t i = 1; i < store.candidate_calls.size() && i < 20; ++i)
    EXPECT_EQ(store.candidate_calls[i].limit, 1 << i);
}

// ---------------------------------------------------------------- stores without row locks

// A takeover on a store with conditional writes charges nothing before its write: the
// in-flight deliveries are recorded as lost with the epoch bump, kept out of the first
// candidates, and charged (then cleared) only once the write took effect; then, due again,
// they are offered and written to the lane in a second conditional write, so the batch is
// what a locking store would have made.
TEST(ClaimProtocolTest, ConditionalWritesChargeATakeoverAfterItsWrite) {
  ScriptedStore store;
  store.mode = LaneConcurrency::kConditionalWrites;
  store.held = {OtherHolders(Snapshot("h", 4, 20, {"z"}), /*expired=*/true)};
  store.takeover = {Snapshot("h", 4, 20, {"z", "w"})};
  store.attempts = {{"z", 0}, {"w", 1}};
  store.rows.push_back({Row(0, "v", std::nullopt, /*claims=*/2)});
  store.rows.push_back({Row(0, "z", std::nullopt, /*claims=*/1, /*attempts=*/1)});

  const auto claimed = run_claim(store, std::nullopt, 10, kWithHolder);

  ASSERT_EQ(store.candidate_calls.size(), 2u);
  EXPECT_EQ(sorted(store.candidate_calls[0].lanes[0].excluded), (Names{"w", "z"}))
      << "the lost deliveries are not candidates before they are charged";
  EXPECT_EQ(store.candidate_calls[0].lanes[0].room, kMaxInFlightPerLane);
  EXPECT_EQ(store.candidate_calls[1].lanes[0].excluded, (Names{"v"}))
      << "once charged, they are candidates again";
  ASSERT_EQ(store.updates.size(), 2u);
  const LaneUpdate& first = store.updates[0];
  EXPECT_EQ(first.read_epoch, 20) << "the write is conditional on the epoch read";
  EXPECT_EQ(first.write.epoch, 21);
  EXPECT_TRUE(first.write.hold);
  EXPECT_EQ(sorted(first.lost), (Names{"w", "z"})) << "recorded with the epoch bump";
  EXPECT_EQ(first.in_flight, (Names{"v"}));
  const LaneUpdate& second = store.updates[1];
  EXPECT_EQ(second.read_epoch, 21) << "conditional on the epoch the first write set";
  EXPECT_EQ(second.write.epoch, 21);
  EXPECT_TRUE(second.lost.empty());
  EXPECT_EQ(second.in_flight, (Names{"v", "z"}));
  const auto write_at = std::find(store.calls.begin(), store.calls.end(), "write_lanes");
  const auto charge_at = std::find(store.calls.begin(), store.calls.end(), "write_charges");
  ASSERT_NE(charge_at, store.calls.end());
  EXPECT_LT(write_at, charge_at) << "charged only after the write took effect";
  ASSERT_EQ(store.charges.size(), 2u);
  ASSERT_EQ(store.cleared.size(), 1u);
  EXPECT_EQ(store.cleared[0].epoch, 21);
  ASSERT_EQ(Ids(claimed), (Names{"v", "z"}));
  EXPECT_EQ(claimed[1].token.epoch, 21);
  EXPECT_EQ(claimed[1].token.claims, 1) << "the claims counter after the charge";
}

// The second write found the lane changed (taken over again): only the picks its first
// write recorded are kept.
TEST(ClaimProtocolTest, ConditionalWritesKeepOnlyWhatAWriteRecorded) {
  ScriptedStore store;
  store.mode = LaneConcurrency::kConditionalWrites;
  store.held = {OtherHolders(Snapshot("h", 4, 20, {"z"}), /*expired=*/true)};
  store.takeover = {Snapshot("h", 4, 20, {"z"})};
  store.attempts = {{"z", 0}};
  store.rows.push_back({Row(0, "v")});
  store.rows.push_back({Row(0, "z", std::nullopt, 1, 1)});
  store.refused_from = {{{"h", 4}, 1}};

  const auto claimed = run_claim(store, std::nullopt, 10, kWithHolder);

  EXPECT_EQ(Ids(claimed), (Names{"v"}));
  EXPECT_EQ(store.updates.size(), 2u);
}

// Another claim got to the lane first: this claim gives up the lane's picks and charges
// nothing for it (the winner recorded the lost deliveries itself); other lanes are kept.
TEST(ClaimProtocolTest, ConditionalWritesGiveUpTheLanesWhoseWriteFailed) {
  ScriptedStore store;
  store.mode = LaneConcurrency::kConditionalWrites;
  store.work = Lanes("h", 2);
  store.acquirable.push_back({Acquired(Snapshot("h", 0, 5, {"old"}), /*had_owner=*/true, 1),
                              Acquired(Snapshot("h", 1, 7), /*had_owner=*/false, 2)});
  store.attempts = {{"old", 0}};
  store.rows.push_back({Row(0, "a"), Row(1, "b")});
  store.refused_writes = {{"h", 0}};

  const auto claimed = run_claim(store, std::nullopt, 10, kWithHolder);

  EXPECT_EQ(Ids(claimed), (Names{"b"})) << "the lost lane's pick is given up";
  EXPECT_TRUE(store.charges.empty()) << "nothing charged for a takeover that did not happen";
  EXPECT_TRUE(store.cleared.empty());
}

// A lane found with a lost list (a claim died between its takeover and the charge) is
// charged by whoever holds it next; its lost deliveries are not candidates until then.
TEST(ClaimProtocolTest, ConditionalWritesChargeALostListLeftBehind) {
  ScriptedStore store;
  store.mode = LaneConcurrency::kConditionalWrites;
  LaneSnapshot left = Snapshot("h", 3, 8, {"running"});
  left.lost = {"dropped"};
  store.held = {Own(left)};
  store.attempts = {{"dropped", 4}};

  const auto claimed = run_claim(store, std::nullopt, 10, kWithHolder);

  EXPECT_TRUE(claimed.empty());
  ASSERT_EQ(store.candidate_calls.size(), 2u);
  EXPECT_EQ(sorted(store.candidate_calls[0].lanes[0].excluded), (Names{"dropped", "running"}));
  EXPECT_EQ(store.candidate_calls[1].lanes[0].excluded, (Names{"running"}));
  ASSERT_EQ(store.updates.size(), 1u) << "nothing new picked: no second write";
  const LaneUpdate& u = store.updates[0];
  EXPECT_TRUE(u.write.hold) << "the lane is written to keep the lost list until it is charged";
  EXPECT_EQ(u.write.epoch, 8) << "still the caller's lane: no epoch move";
  EXPECT_EQ(u.in_flight, (Names{"running"}));
  EXPECT_EQ(u.lost, (Names{"dropped"}));
  ASSERT_EQ(store.charges.size(), 1u);
  EXPECT_EQ(store.charges[0].event_id, "dropped");
  EXPECT_EQ(store.charges[0].attempts, 5);
  ASSERT_EQ(store.cleared.size(), 1u);
}

// A locking store never has a write refused; if it reports one, that is a bug, said so.
TEST(ClaimProtocolTest, ALockingStoreThatRefusesAWriteIsAnInternalError) {
  ScriptedStore store;
  store.work = Lanes("h", 1);
  store.acquirable.push_back({Acquired(Snapshot("h", 0, 1), false, 1)});
  store.rows.push_back({Row(0, "a")});
  store.refused_writes = {{"h", 0}};
  EXPECT_TRUE(ThrowsCoreError([&] { run_claim(store, std::nullopt, 10, kWithHolder); },
                              ErrorCode::kInternal));
}

// The maintenance takeover (expired_takeover.hpp). Under locks: the in-flight deliveries
// are charged, then every lane is handed back at a new epoch, with nothing in flight.
TEST(ExpiredTakeover, UnderLocksChargesThenHandsTheLanesBack) {
  ScriptedStore store;
  store.attempts = {{"e1", 0}, {"e2", 2}};
  store.policy.max_attempts = 3;
  const std::vector<LaneSnapshot> expired{{"h", 4, 7, {"e1", "e2"}, {}}, {"h", 9, 1, {}, {}}};
  EXPECT_EQ(take_over_expired_lanes(store, expired), 2);
  EXPECT_EQ(store.calls, (Names{"lock_lost", "write_charges", "write_lanes"}));
  ASSERT_EQ(store.charges.size(), 2u);
  EXPECT_EQ(store.charges[0].attempts, 1);
  EXPECT_FALSE(store.charges[0].dead);
  EXPECT_EQ(store.charges[1].attempts, 3);
  EXPECT_TRUE(store.charges[1].dead) << "the budget's last attempt was the lost one";
  ASSERT_EQ(store.updates.size(), 2u);
  for (const auto& u : store.updates) {
    EXPECT_TRUE(u.write.write);
    EXPECT_FALSE(u.write.hold) << "handed back, not held";
    EXPECT_TRUE(u.in_flight.empty());
    EXPECT_TRUE(u.lost.empty()) << "charged already: nothing owed";
  }
  EXPECT_EQ(store.updates[0].write.epoch, 8) << "the epoch moves: the old tokens are fenced";
  EXPECT_EQ(store.updates[1].write.epoch, 2);
}

// Conditional writes: the hand-back records what was in flight (and an older lost list)
// as lost; only the lanes whose write took effect are charged, then cleared at the epoch
// written. A refused lane changed hands: its new holder charges.
TEST(ExpiredTakeover, WithConditionalWritesChargesOnlyTheLanesItTook) {
  ScriptedStore store;
  store.mode = LaneConcurrency::kConditionalWrites;
  store.attempts = {{"e1", 0}, {"old", 1}, {"e3", 0}};
  store.refused_writes = {{"h", 9}};
  const std::vector<LaneSnapshot> expired{{"h", 4, 7, {"e1"}, {"old"}}, {"h", 9, 1, {"e3"}, {}}};
  EXPECT_EQ(take_over_expired_lanes(store, expired), 1);
  EXPECT_EQ(store.calls, (Names{"write_lanes", "lock_lost", "write_charges", "clear_lost"}));
  ASSERT_EQ(store.updates.size(), 2u);
  EXPECT_EQ(store.updates[0].read_epoch, 7) << "conditional on the epoch read";
  EXPECT_EQ(store.updates[0].lost, (Names{"old", "e1"}));
  EXPECT_EQ(store.updates[1].lost, (Names{"e3"}));
  Names charged;
  for (const auto& c : store.charges) charged.push_back(c.event_id);
  std::sort(charged.begin(), charged.end());
  EXPECT_EQ(charged, (Names{"e1", "old"})) << "the refused lane's delivery was charged";
  ASSERT_EQ(store.cleared.size(), 1u);
  EXPECT_EQ(store.cleared[0].lane, 4);
  EXPECT_EQ(store.cleared[0].epoch, 8);
}

TEST(ExpiredTakeover, NothingExpiredAsksNothing) {
  ScriptedStore store;
  EXPECT_EQ(take_over_expired_lanes(store, {}), 0);
  EXPECT_TRUE(store.calls.empty());
}

}  // namespace
}  // namespace relaybus::core

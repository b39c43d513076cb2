// run_positions_claim and take_over_expired_positions over a small in-memory store that
// keeps lanes, deliveries at positions and exception rows, and records what it was asked.
// Each test states one decision of the 0.3.0 claim (docs/design.md, "0.3.0: the store").
#include "core/positions_claim.hpp"

#include "core/error.hpp"
#include "core/lease_token.hpp"
#include "expect_core_error.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <functional>
#include <vector>

namespace relaybus::core {
namespace {

using Names = std::vector<std::string>;
using LaneKey = std::pair<std::string, std::int16_t>;
using RowKey = std::tuple<std::string, std::int16_t, Position>;
using testing::ThrowsCoreError;

constexpr std::int64_t kNow = 1'000'000'000;

struct FakeLane {
  std::int64_t epoch = 0;
  std::optional<std::string> owner;
  bool expired = false;
  LaneBinding binding;
  LaneProgress progress;
  PositionSet retrying;
  bool renewal_due = true;  // a held lane's lease is due for renewal (the default: read it)
  bool in_use = false;      // a delivery was published since its last renewal
};

struct FakeDelivery {
  std::string event_id;
  std::optional<std::string> key;
  std::int64_t available_at = kNow;
  bool due_when_visible = false;
};

struct FakeException {
  std::string event_id;
  std::optional<std::string> key;
  bool dead = false;
  std::int32_t attempts = 0;
  std::int32_t claims = 0;
  std::int64_t available_at = kNow;
  bool lease_lost = false;
};

struct Subscription {
  bool paused = false;
  RetryPolicy policy;
};

class FakeStore final : public PositionsClaimStore, public PositionsTakeoverStore {
 public:
  std::string worker = "w";
  std::int64_t now = kNow;
  std::map<std::string, Subscription> subscribed{{"h", {}}};
  std::map<LaneKey, FakeLane> lanes;
  std::map<RowKey, FakeDelivery> deliveries;
  std::map<RowKey, FakeException> exceptions;
  std::set<LaneKey> locked_elsewhere;  // lock_acquirable skips them
  bool caller_has_holder = false;

  Names calls;
  std::vector<std::pair<std::vector<LaneRef>, int>> acquire_calls;
  std::vector<std::vector<LaneKey>> reads;
  std::vector<LaneKey> asked_in_use;  // read_lanes: lanes asked whether in use
  std::vector<std::vector<LaneKey>> probes;
  std::vector<std::vector<LaneKey>> locks;  // lock_held's lanes, per call
  std::vector<bool> lock_waits;             // and whether it waited
  std::function<void()> before_lock;        // runs as lock_held begins (a concurrent change)
  std::vector<PositionsLaneWrite> lane_writes;

  // ---- setup helpers ----
  FakeLane& lane(const std::string& handler, std::int16_t lane_number) {
    return lanes[{handler, lane_number}];
  }
  // Appends a delivery at the lane's next position and returns it.
  Position publish(const std::string& handler, std::int16_t lane_number, std::string event_id,
                   std::optional<std::string> key = std::nullopt,
                   std::int64_t available_at = kNow) {
    lane(handler, lane_number);  // the lane exists (subscribe made it)
    const Position p = tail(handler, lane_number) + 1;
    deliveries[{handler, lane_number, p}] = {std::move(event_id), std::move(key), available_at};
    return p;
  }
  Position tail(const std::string& handler, std::int16_t lane_number) const {
    Position t = 0;
    for (const auto& [k, d] : deliveries)
      if (std::get<0>(k) == handler && std::get<1>(k) == lane_number)
        t = std::max(t, std::get<2>(k));
    return t;
  }
  void hold(const std::string& handler, std::int16_t lane_number, std::string owner,
            LaneBinding binding) {
    FakeLane& l = lane(handler, lane_number);
    l.owner = std::move(owner);
    l.binding = binding;
    l.expired = binding.lease_expired;
  }
  // A worker completes every window position it runs (complete_positions) and every retry
  // (its exception row goes).
  void complete_all(const std::string& handler, std::int16_t lane_number) {
    FakeLane& l = lane(handler, lane_number);
    std::vector<Position> all(l.progress.in_flight.begin(), l.progress.in_flight.end());
    l.progress = complete_positions(l.progress, all).progress;
    for (Position p : l.retrying) exceptions.erase({handler, lane_number, p});
    l.retrying.clear();
  }

  // ---- PositionsClaimStore ----
  std::int64_t now_us() override { return now; }

  std::vector<PositionsHandler> subscribed_handlers(
      const std::optional<Names>& requested) override {
    calls.push_back("subscribed_handlers");
    std::vector<PositionsHandler> out;
    for (const auto& [name, s] : subscribed)
      if (!requested || std::find(requested->begin(), requested->end(), name) != requested->end())
        out.push_back({{name, s.paused}, s.policy});
    return out;
  }

  std::vector<HeldPositionsLane> held_lanes(const Names& handlers) override {
    calls.push_back("held_lanes");
    std::vector<HeldPositionsLane> out;
    for (auto& [k, l] : lanes) {
      if (!l.owner || *l.owner != worker) continue;
      if (std::find(handlers.begin(), handlers.end(), k.first) == handlers.end()) continue;
      out.push_back(held(k, l));
    }
    std::vector<const PositionsLane*> asked;
    for (const auto& h : out) asked.push_back(&h.lane);
    const std::vector<HeldLaneProbe> found = probe_held(asked);
    for (std::size_t i = 0; i < out.size(); ++i) out[i].probe = found[i];
    return out;
  }

  std::vector<HeldPositionsLane> lock_held(const std::vector<LaneRef>& refs, bool wait) override {
    calls.push_back("lock_held");
    if (before_lock) before_lock();
    std::vector<LaneKey> keys;
    std::vector<HeldPositionsLane> out;
    for (const auto& r : refs) {
      const LaneKey k{r.handler, r.lane};
      keys.push_back(k);
      if (!wait && locked_elsewhere.count(k) != 0) continue;  // SKIP LOCKED
      const FakeLane& l = lanes.at(k);
      if (!l.owner || *l.owner != worker) continue;
      out.push_back(held(k, l));
    }
    locks.push_back(keys);
    lock_waits.push_back(wait);
    return out;
  }

  std::vector<PositionsLane> lock_for_takeover(const std::vector<LaneRef>& refs) override {
    calls.push_back("lock_for_takeover");
    std::vector<PositionsLane> out;
    for (const auto& r : refs)
      out.push_back(snapshot({r.handler, r.lane}, lanes.at({r.handler, r.lane})));
    return out;
  }

  std::vector<LaneWorkProbe> lanes_with_work(const Names& handlers) override {
    calls.push_back("lanes_with_work");
    std::vector<LaneWorkProbe> out;
    for (auto& [k, l] : lanes) {
      if (std::find(handlers.begin(), handlers.end(), k.first) == handlers.end()) continue;
      if (!is_acquirable(l)) continue;
      LaneWorkProbe p;
      p.lane = {k.first, k.second};
      p.has_owner = l.owner.has_value();
      p.progress = l.progress;
      p.retrying = l.retrying;
      for (const auto& [dk, d] : deliveries)
        if (std::get<0>(dk) == k.first && std::get<1>(dk) == k.second &&
            std::get<2>(dk) > l.progress.acked_upto) {
          p.first_position = std::get<2>(dk);
          p.first_available_us = d.available_at;
          break;
        }
      std::set<std::string> keys;  // heads only: a key's lowest pending row
      for (const auto& [xk, x] : exceptions) {
        if (std::get<0>(xk) != k.first || std::get<1>(xk) != k.second || x.dead) continue;
        if (x.key && !keys.insert(*x.key).second) continue;
        if (x.available_at <= now)
          p.due_exception_us =
              std::min(x.available_at, p.due_exception_us.value_or(x.available_at));
      }
      out.push_back(std::move(p));
    }
    return out;
  }

  std::vector<AcquiredPositionsLane> lock_acquirable(const std::vector<LaneRef>& window,
                                                     int wanted) override {
    calls.push_back("lock_acquirable");
    acquire_calls.push_back({window, wanted});
    std::vector<AcquiredPositionsLane> out;
    for (std::size_t i = 0; i < window.size() && static_cast<int>(out.size()) < wanted; ++i) {
      const LaneKey k{window[i].handler, window[i].lane};
      if (locked_elsewhere.count(k) != 0) continue;
      const FakeLane& l = lanes.at(k);
      if (!is_acquirable(l)) continue;
      out.push_back({snapshot(k, l), l.owner.has_value(), i + 1});
    }
    return out;
  }

  std::vector<LaneContents> read_lanes(const std::vector<const PositionsLane*>& asked) override {
    calls.push_back("read_lanes");
    std::vector<LaneKey> keys;
    std::vector<LaneContents> out;
    for (const PositionsLane* l : asked) {
      keys.push_back({l->handler, l->lane});
      LaneContents c;
      const Position acked = lanes.at({l->handler, l->lane}).progress.acked_upto;
      for (const auto& [k, d] : deliveries) {
        if (std::get<0>(k) != l->handler || std::get<1>(k) != l->lane) continue;
        const Position p = std::get<2>(k);
        c.tail = std::max(c.tail, p);
        if (p > acked && p <= acked + kPositionWindow)
          c.window.push_back({p, d.event_id, d.key, d.available_at, d.due_when_visible});
      }
      for (const auto& [k, x] : exceptions)
        if (std::get<0>(k) == l->handler && std::get<1>(k) == l->lane && !x.dead)
          c.pending.push_back(
              {std::get<2>(k), x.event_id, x.key, x.available_at, x.attempts, x.claims});
      if (l->lease_renewal_due) {
        c.in_use = lanes.at({l->handler, l->lane}).in_use;
        asked_in_use.push_back({l->handler, l->lane});
      }
      out.push_back(std::move(c));
    }
    reads.push_back(keys);
    return out;
  }

  // held_lanes' probes, written from the maps apart from core::held_lane_probe
  // (HeldLaneProbeAgreesWithTheRule checks the two agree).
  std::vector<HeldLaneProbe> probe_held(const std::vector<const PositionsLane*>& asked) {
    std::vector<LaneKey> keys;
    std::vector<HeldLaneProbe> out;
    for (const PositionsLane* l : asked) {
      keys.push_back({l->handler, l->lane});
      const LaneProgress& g = l->progress;
      HeldLaneProbe p;
      for (const auto& [k, d] : deliveries) {  // ascending by position within a lane
        const Position pos = std::get<2>(k);
        if (std::get<0>(k) != l->handler || std::get<1>(k) != l->lane) continue;
        if (pos <= g.acked_upto || pos > g.acked_upto + kPositionWindow) continue;
        if (g.done.count(pos) != 0 || g.in_flight.count(pos) != 0) continue;
        p.window_since_us = d.available_at;
        break;
      }
      std::set<std::string> keys;              // heads only: a key's lowest pending row
      for (const auto& [k, x] : exceptions) {  // ascending by position within a lane
        if (std::get<0>(k) != l->handler || std::get<1>(k) != l->lane || x.dead) continue;
        if (x.key && !keys.insert(*x.key).second) continue;
        if (x.available_at <= now && l->retrying.count(std::get<2>(k)) == 0)
          p.due_exception_us =
              std::min(x.available_at, p.due_exception_us.value_or(x.available_at));
      }
      out.push_back(p);
    }
    probes.push_back(keys);
    return out;
  }

  // ---- PositionsWriteStore ----
  void insert_exceptions(const std::vector<NewException>& rows) override {
    calls.push_back("insert_exceptions");
    for (const auto& r : rows) {
      const RowKey k{r.handler, r.lane, r.position};
      const auto d = deliveries.find(k);
      if (d == deliveries.end()) continue;  // from its delivery row: none, nothing inserted
      if (exceptions.count(k) != 0) throw std::logic_error("duplicate exception row");
      exceptions[k] = {d->second.event_id, d->second.key,     r.dead,      r.attempts,
                       r.claims,           r.available_at_us, r.lease_lost};
    }
  }

  void charge_exceptions(const std::vector<ExceptionCharge>& charges) override {
    calls.push_back("charge_exceptions");
    for (const auto& c : charges) {
      auto it = exceptions.find({c.handler, c.lane, c.position});
      if (it == exceptions.end() || it->second.dead) continue;
      it->second.attempts = c.attempts;
      it->second.dead = c.dead;
      it->second.claims += 1;
      it->second.available_at = c.available_at_us;
      it->second.lease_lost = true;
    }
  }

  void write_lanes(const std::vector<PositionsLaneWrite>& writes) override {
    calls.push_back("write_lanes");
    for (const auto& w : writes) {
      lane_writes.push_back(w);
      FakeLane& l = lanes.at({w.handler, w.lane});
      l.epoch = w.write.epoch;
      l.progress = w.progress;
      l.retrying = w.retrying;
      if (w.write.hold) {
        l.owner = worker;
        l.expired = false;
        if (w.write.new_holder) {
          l.binding = {};
          l.binding.to_holder = caller_has_holder;
          l.binding.same_holder = true;
          l.binding.backend_alive = true;
        }
      } else {
        l.owner.reset();
        l.expired = false;
        l.binding = {};
      }
    }
  }

  // ---- PositionsTakeoverStore ----
  std::vector<std::vector<PendingException>> retrying_rows(
      const std::vector<const PositionsLane*>& asked) override {
    calls.push_back("retrying_rows");
    std::vector<std::vector<PendingException>> out;
    for (const PositionsLane* l : asked) {
      std::vector<PendingException> rows;
      for (Position p : l->retrying) {
        const auto it = exceptions.find({l->handler, l->lane, p});
        if (it == exceptions.end() || it->second.dead) continue;
        rows.push_back({p, it->second.event_id, it->second.key, it->second.available_at,
                        it->second.attempts, it->second.claims});
      }
      out.push_back(std::move(rows));
    }
    return out;
  }

 private:
  bool is_acquirable(const FakeLane& l) const {
    return acquirable(l.owner.has_value(), l.expired, l.owner && *l.owner == worker);
  }
  static PositionsLane snapshot(const LaneKey& k, const FakeLane& l) {
    return {k.first, k.second, l.epoch, l.progress, l.retrying};
  }
  static HeldPositionsLane held(const LaneKey& k, const FakeLane& l) {
    HeldPositionsLane h{snapshot(k, l), l.binding, {}};
    h.binding.lease_expired = l.expired;
    h.lane.lease_renewal_due = l.renewal_due;
    return h;
  }
};

// The caller's own backend-bound lane, live lease.
LaneBinding Mine() {
  LaneBinding b;
  b.backend_alive = true;
  return b;
}

std::vector<PositionsClaimed> Claim(FakeStore& store, int batch_size,
                                    std::optional<Names> handlers = std::nullopt) {
  return run_positions_claim(store, handlers, batch_size, store.caller_has_holder);
}

Names EventIds(const std::vector<PositionsClaimed>& claimed) {
  Names ids;
  for (const auto& c : claimed) ids.push_back(c.event_id);
  return ids;
}

// ---- window picks and tokens ----

TEST(PositionsClaimTest, AFreeLaneIsAcquiredAtANewEpochAndItsWindowPicked) {
  FakeStore store;
  store.publish("h", 3, "e1");
  store.publish("h", 3, "e2");
  const auto claimed = Claim(store, 10);
  EXPECT_EQ(EventIds(claimed), (Names{"e1", "e2"}));
  const FakeLane& l = store.lane("h", 3);
  EXPECT_EQ(l.owner, "w");
  EXPECT_EQ(l.epoch, 1);
  EXPECT_EQ(l.progress.in_flight, (PositionSet{1, 2}));
  ASSERT_EQ(claimed.size(), 2u);
  const PositionToken t = parse_position_token(encode(claimed[1].token));
  EXPECT_EQ(t.handler, "h");
  EXPECT_EQ(t.lane, 3);
  EXPECT_EQ(t.epoch, 1);
  EXPECT_EQ(t.position, 2);
  EXPECT_EQ(t.claims, 0);
  EXPECT_EQ(claimed[1].attempts, 0);
}

TEST(PositionsClaimTest, AHeldLaneKeepsItsEpochAndAddsToItsInFlightList) {
  FakeStore store;
  store.publish("h", 0, "e1");
  Claim(store, 1);
  store.publish("h", 0, "e2");
  const auto claimed = Claim(store, 10);
  EXPECT_EQ(EventIds(claimed), (Names{"e2"}));
  EXPECT_EQ(claimed[0].token.epoch, 1);
  EXPECT_EQ(store.lane("h", 0).progress.in_flight, (PositionSet{1, 2}));
}

TEST(PositionsClaimTest, ALaneTakesAtMost32InFlightAndTheBatchSpreadsOverOtherLanes) {
  FakeStore store;
  for (int i = 0; i < 40; ++i) store.publish("h", 1, "a" + std::to_string(i));
  for (int i = 0; i < 10; ++i) store.publish("h", 2, "b" + std::to_string(i));
  const auto claimed = Claim(store, 100);
  int from_1 = 0, from_2 = 0;
  for (const auto& c : claimed) (c.token.lane == 1 ? from_1 : from_2)++;
  EXPECT_EQ(from_1, kMaxInFlightPerLane);
  EXPECT_EQ(from_2, 10);
  EXPECT_TRUE(Claim(store, 100).empty()) << "a full lane gives nothing more";
}

TEST(PositionsClaimTest, RetriedRowsCountAgainstTheLaneCap) {
  FakeStore store;
  FakeLane& l = store.lane("h", 0);
  l.owner = "w";
  l.binding = Mine();
  for (Position p = 1; p <= 30; ++p) {
    store.publish("h", 0, "x" + std::to_string(p));
    store.exceptions[{"h", 0, p}] = {"x" + std::to_string(p), std::nullopt, false, 1, 1, kNow};
    l.retrying.insert(p);
  }
  l.progress.acked_upto = 30;
  for (int i = 0; i < 5; ++i) store.publish("h", 0, "y" + std::to_string(i));
  EXPECT_EQ(Claim(store, 10).size(), 2u) << "30 retried + 2 = the cap of 32";
}

TEST(PositionsClaimTest, TheBatchSizeBoundsThePicks) {
  FakeStore store;
  for (int i = 0; i < 5; ++i) store.publish("h", 0, "e" + std::to_string(i));
  EXPECT_EQ(Claim(store, 3).size(), 3u);
  EXPECT_EQ(store.lane("h", 0).progress.in_flight.size(), 3u);
}

// ---- per-key order ----

TEST(PositionsClaimTest, OneDeliveryPerKeyPerBatchAndNoneWhileItsPredecessorRuns) {
  FakeStore store;
  store.publish("h", 0, "k1", "K");
  store.publish("h", 0, "k2", "K");
  store.publish("h", 0, "u1");
  EXPECT_EQ(EventIds(Claim(store, 10)), (Names{"k1", "u1"}));
  EXPECT_TRUE(Claim(store, 10).empty()) << "k2 waits while k1 is in flight";
  store.complete_all("h", 0);
  EXPECT_EQ(EventIds(Claim(store, 10)), (Names{"k2"}));
}

TEST(PositionsClaimTest, OneDeliveryPerKeyPerBatchEvenAcrossLanes) {
  // A key lives in one lane of a handler; rows in the wrong lane (written by hand) still
  // give one delivery of a key per batch.
  FakeStore store;
  store.publish("h", 1, "a", "K", kNow - 2);
  store.publish("h", 2, "b", "K", kNow - 1);
  store.publish("h", 3, "x", std::nullopt, kNow - 3);
  store.exceptions[{"h", 3, 1}] = {"x", "K", false, 1, 1, kNow - 3};
  store.lane("h", 3).progress.acked_upto = 1;
  EXPECT_EQ(EventIds(Claim(store, 10)), (Names{"x"}));
  FakeStore window_only;
  window_only.publish("h", 1, "a", "K", kNow - 2);
  window_only.publish("h", 2, "b", "K", kNow - 1);
  EXPECT_EQ(EventIds(Claim(window_only, 10)), (Names{"a"}));
}

TEST(PositionsClaimTest, AKeyWithAPendingExceptionRowParksItsWindowDeliveries) {
  FakeStore store;
  store.publish("h", 0, "k1", "K");
  store.publish("h", 0, "k2", "K");
  store.publish("h", 0, "u1");
  // k1 failed earlier: its exception row waits an hour for its retry.
  store.exceptions[{"h", 0, 1}] = {"k1", "K", false, 1, 1, kNow + 3'600'000'000LL};
  store.lane("h", 0).progress.acked_upto = 1;
  EXPECT_EQ(EventIds(Claim(store, 10)), (Names{"u1"}));
  const auto parked = store.exceptions.find({"h", 0, 2});
  ASSERT_NE(parked, store.exceptions.end()) << "k2 was parked behind k1";
  EXPECT_EQ(parked->second.event_id, "k2");
  EXPECT_EQ(parked->second.attempts, 0);
  EXPECT_EQ(parked->second.claims, 0);
  EXPECT_FALSE(parked->second.dead);
  EXPECT_EQ(store.lane("h", 0).progress.acked_upto, 2) << "the cursor passed the parked one";
  // Once k1 is due, it runs first, alone; k2 only after k1 ended.
  store.now = kNow + 3'600'000'000LL;
  store.complete_all("h", 0);
  EXPECT_EQ(EventIds(Claim(store, 10)), (Names{"k1"}));
  store.complete_all("h", 0);
  EXPECT_EQ(EventIds(Claim(store, 10)), (Names{"k2"}));
}

TEST(PositionsClaimTest, ANotDueDeliveryIsDeferredAndPickedFromItsExceptionRowOnceDue) {
  FakeStore store;
  store.publish("h", 0, "later", std::nullopt, kNow + 5'000'000);
  store.publish("h", 0, "now");
  EXPECT_EQ(EventIds(Claim(store, 10)), (Names{"now"}));
  const auto deferred = store.exceptions.find({"h", 0, 1});
  ASSERT_NE(deferred, store.exceptions.end());
  EXPECT_EQ(deferred->second.available_at, kNow + 5'000'000);
  EXPECT_EQ(deferred->second.attempts, 0);
  EXPECT_TRUE(Claim(store, 10).empty()) << "not due yet";
  store.now = kNow + 5'000'000;
  const auto claimed = Claim(store, 10);
  ASSERT_EQ(EventIds(claimed), (Names{"later"}));
  EXPECT_EQ(claimed[0].token.position, 1);
  EXPECT_EQ(claimed[0].token.claims, 0);
  EXPECT_EQ(store.lane("h", 0).retrying, (PositionSet{1}));
}

TEST(PositionsClaimTest, DueExceptionRowsArePickedBeforeTheWindow) {
  FakeStore store;
  store.publish("h", 0, "x");
  store.publish("h", 0, "w1");
  store.exceptions[{"h", 0, 1}] = {"x", std::nullopt, false, 2, 3, kNow - 10};
  store.lane("h", 0).progress.acked_upto = 1;
  const auto claimed = Claim(store, 1);
  ASSERT_EQ(EventIds(claimed), (Names{"x"}));
  EXPECT_EQ(claimed[0].attempts, 2) << "the exception row's attempts";
  EXPECT_EQ(claimed[0].token.claims, 3) << "the exception row's claims counter";
}

TEST(PositionsClaimTest, ExceptionPicksTakeTheLowestOfAKeyOnlyAndNoKeyTwice) {
  PositionSet retrying;
  const std::vector<PendingException> rows = {
      {3, "a3", "A", kNow + 1, 1, 1},  // A's lowest is not due: nothing of A
      {4, "a4", "A", kNow, 0, 0},          {5, "b5", "B", kNow, 1, 1},
      {6, "b6", "B", kNow, 0, 0},  // not B's lowest
      {7, "u7", std::nullopt, kNow, 0, 0}, {8, "c8", "C", kNow, 0, 0},
      {9, "d9", "D", kNow, 0, 0},
  };
  EXPECT_EQ(pick_exceptions(rows, retrying, /*in_flight=*/{"D"}, /*in_batch=*/{"C"}, 10, kNow),
            (std::vector<std::size_t>{2, 4}));
  EXPECT_EQ(pick_exceptions(rows, retrying, {}, {}, 1, kNow), (std::vector<std::size_t>{2}))
      << "within the room";
  EXPECT_TRUE(pick_exceptions(rows, retrying, {}, {}, 0, kNow).empty());
  EXPECT_TRUE(pick_exceptions(rows, retrying, {}, {}, -3, kNow).empty());
}

TEST(PositionsClaimTest, AKeyBeingRetriedTakesNoOtherExceptionRow) {
  const std::vector<PendingException> rows = {
      {2, "k2", "K", kNow, 0, 1},  // a requeued dead head, below the running retry
      {5, "k5", "K", kNow, 1, 1},
      {6, "u6", std::nullopt, kNow, 1, 1},
  };
  EXPECT_EQ(pick_exceptions(rows, PositionSet{5, 6}, {}, {}, 10, kNow),
            (std::vector<std::size_t>{}));
}

TEST(PositionsClaimTest, AWindowDeliveryInFlightBlocksItsKeysExceptionRows) {
  FakeStore store;
  store.publish("h", 0, "k1", "K");
  store.publish("h", 0, "k2", "K");
  FakeLane& l = store.lane("h", 0);
  l.owner = "w";
  l.binding = Mine();
  l.progress.acked_upto = 1;  // k1 (position 1) is a requeued dead head below k2
  l.progress.in_flight = {2};
  store.exceptions[{"h", 0, 1}] = {"k1", "K", false, 0, 2, kNow};
  EXPECT_TRUE(Claim(store, 10).empty());
}

// ---- takeovers ----

TEST(PositionsClaimTest, AnOrphanedLaneIsTakenOverChargedAndItsLostWorkRunsAgain) {
  FakeStore store;
  store.subscribed["h"].policy.max_attempts = 3;
  store.publish("h", 0, "e1");
  store.publish("h", 0, "e2");
  store.publish("h", 0, "e3");
  FakeLane& l = store.lane("h", 0);
  l.epoch = 7;
  l.owner = "w";
  l.binding = {};  // bound to a backend that is gone
  l.progress.in_flight = {1, 2};
  const auto claimed = Claim(store, 10);
  EXPECT_EQ(store.lane("h", 0).epoch, 8) << "the epoch moved";
  const auto lost = store.exceptions.find({"h", 0, 1});
  ASSERT_NE(lost, store.exceptions.end()) << "the lost window position became an exception row";
  EXPECT_EQ(lost->second.attempts, 1);
  EXPECT_EQ(lost->second.claims, kClaimsAfterWindowAttempt);
  EXPECT_TRUE(lost->second.lease_lost);
  EXPECT_FALSE(lost->second.dead);
  // The lost ones are due at once and run again in this claim, from their rows.
  EXPECT_EQ(EventIds(claimed), (Names{"e1", "e2", "e3"}));
  for (const auto& c : claimed) EXPECT_EQ(c.token.epoch, 8);
  EXPECT_EQ(claimed[0].attempts, 1);
  EXPECT_EQ(claimed[0].token.claims, 1);
  EXPECT_EQ(store.lane("h", 0).retrying, (PositionSet{1, 2}));
  EXPECT_EQ(store.lane("h", 0).progress.in_flight, (PositionSet{3}));
}

TEST(PositionsClaimTest, ATakeoverChargesRetriedRowsAndDeadLettersAtTheBudget) {
  FakeStore store;
  store.subscribed["h"].policy.max_attempts = 3;
  store.publish("h", 0, "x1");
  store.publish("h", 0, "x2");
  FakeLane& l = store.lane("h", 0);
  l.owner = "w";
  LaneBinding other_holder;
  other_holder.to_holder = true;
  l.binding = other_holder;
  l.expired = true;
  l.progress.acked_upto = 2;
  l.retrying = {1, 2};
  store.exceptions[{"h", 0, 1}] = {"x1", std::nullopt, false, 2, 4, kNow - 100};
  store.exceptions[{"h", 0, 2}] = {"x2", std::nullopt, false, 0, 1, kNow - 100};
  const auto claimed = Claim(store, 10);
  const auto& x1 = store.exceptions.at({"h", 0, 1});
  EXPECT_TRUE(x1.dead) << "its third attempt was lost: dead at max_attempts 3";
  EXPECT_EQ(x1.attempts, 3);
  EXPECT_EQ(x1.claims, 5);
  const auto& x2 = store.exceptions.at({"h", 0, 2});
  EXPECT_FALSE(x2.dead);
  EXPECT_EQ(x2.attempts, 1);
  EXPECT_EQ(x2.claims, 2);
  ASSERT_EQ(EventIds(claimed), (Names{"x2"})) << "the dead one is not claimed";
  EXPECT_EQ(claimed[0].token.claims, 2);
  EXPECT_EQ(claimed[0].attempts, 1);
}

TEST(PositionsClaimTest, AWindowPositionLostAtTheBudgetIsADeadExceptionRow) {
  FakeStore store;
  store.subscribed["h"].policy.max_attempts = 1;
  store.publish("h", 0, "e1");
  FakeLane& l = store.lane("h", 0);
  l.owner = "other";
  l.expired = true;
  l.progress.in_flight = {1};
  EXPECT_TRUE(Claim(store, 10).empty());
  const auto& row = store.exceptions.at({"h", 0, 1});
  EXPECT_TRUE(row.dead);
  EXPECT_EQ(row.attempts, 1);
  EXPECT_EQ(store.lane("h", 0).epoch, 1);
  EXPECT_FALSE(store.lane("h", 0).owner) << "taken over, nothing to run: handed back";
  EXPECT_EQ(store.lane("h", 0).progress.acked_upto, 1);
}

TEST(PositionsClaimTest, AnotherWorkersExpiredLaneWithOnlyInFlightWorkIsTakenOverByAClaim) {
  FakeStore store;
  store.publish("h", 0, "e1");
  FakeLane& l = store.lane("h", 0);
  l.owner = "other";
  l.expired = true;
  l.epoch = 4;
  l.progress.in_flight = {1};
  const auto claimed = Claim(store, 10);
  EXPECT_EQ(EventIds(claimed), (Names{"e1"}));
  EXPECT_EQ(claimed[0].token.epoch, 5);
  EXPECT_EQ(store.lane("h", 0).owner, "w");
}

TEST(PositionsClaimTest, AnotherLiveIncarnationsLaneIsLeftAlone) {
  FakeStore store;
  store.caller_has_holder = true;
  store.publish("h", 0, "e1");
  store.publish("h", 0, "e2");
  FakeLane& l = store.lane("h", 0);
  l.owner = "w";
  l.epoch = 2;
  LaneBinding other;
  other.to_holder = true;
  other.same_holder = false;
  l.binding = other;
  l.progress.in_flight = {1};
  EXPECT_TRUE(Claim(store, 10).empty());
  EXPECT_EQ(store.lane("h", 0).epoch, 2);
  EXPECT_TRUE(store.lane_writes.empty());
  EXPECT_TRUE(store.exceptions.empty());
}

TEST(PositionsClaimTest, TheSameHolderKeepsItsLanesAcrossConnections) {
  FakeStore store;
  store.caller_has_holder = true;
  store.publish("h", 0, "e1");
  store.publish("h", 0, "e2");
  FakeLane& l = store.lane("h", 0);
  l.owner = "w";
  l.epoch = 2;
  LaneBinding same;
  same.to_holder = true;
  same.same_holder = true;
  l.binding = same;
  l.progress.in_flight = {1};
  EXPECT_EQ(EventIds(Claim(store, 10)), (Names{"e2"}));
  EXPECT_EQ(store.lane("h", 0).epoch, 2) << "kept, not taken over";
  EXPECT_TRUE(store.exceptions.empty());
}

TEST(TakeOverExpiredPositionsTest, ChargesAndHandsBackAtANewEpoch) {
  FakeStore store;
  store.publish("h", 0, "e1");
  store.publish("h", 0, "e2");
  store.publish("h", 0, "e3");
  FakeLane& l = store.lane("h", 0);
  l.epoch = 3;
  l.owner = "gone";
  l.expired = true;
  l.progress = {1, {}, {2, 3}};
  l.retrying = {1};
  store.exceptions[{"h", 0, 1}] = {"e1", std::nullopt, false, 1, 1, kNow - 5};
  RetryPolicy policy;
  policy.max_attempts = 2;
  const int taken =
      take_over_expired_positions(store, {{{"h", 0, 3, l.progress, l.retrying}, policy}}, kNow);
  EXPECT_EQ(taken, 1);
  const FakeLane& after = store.lane("h", 0);
  EXPECT_EQ(after.epoch, 4);
  EXPECT_FALSE(after.owner);
  EXPECT_TRUE(after.progress.in_flight.empty());
  EXPECT_TRUE(after.retrying.empty());
  EXPECT_EQ(after.progress.acked_upto, 3);
  EXPECT_TRUE(store.exceptions.at({"h", 0, 1}).dead) << "second attempt lost: max 2";
  EXPECT_EQ(store.exceptions.at({"h", 0, 1}).claims, 2);
  EXPECT_EQ(store.exceptions.at({"h", 0, 2}).attempts, 1);
  EXPECT_EQ(store.exceptions.at({"h", 0, 2}).claims, kClaimsAfterWindowAttempt);
  EXPECT_EQ(store.exceptions.at({"h", 0, 2}).available_at, kNow) << "no backoff";
  EXPECT_EQ(store.calls,
            (Names{"retrying_rows", "insert_exceptions", "charge_exceptions", "write_lanes"}));
}

TEST(TakeOverExpiredPositionsTest, NothingInFlightStillMovesTheEpoch) {
  FakeStore store;
  FakeLane& l = store.lane("h", 5);
  l.epoch = 9;
  l.owner = "gone";
  l.expired = true;
  EXPECT_EQ(take_over_expired_positions(store, {{{"h", 5, 9, {}, {}}, {}}}, kNow), 1);
  EXPECT_EQ(store.lane("h", 5).epoch, 10);
  EXPECT_EQ(store.calls, (Names{"write_lanes"}));
  EXPECT_EQ(take_over_expired_positions(store, {}, kNow), 0);
}

// ---- which lanes, in which order ----

TEST(PositionsClaimTest, APausedHandlersLanesAreNeitherKeptNorAcquired) {
  FakeStore store;
  store.subscribed["p"].paused = true;
  store.publish("p", 0, "p1");
  store.publish("h", 0, "h1");
  EXPECT_EQ(EventIds(Claim(store, 10)), (Names{"h1"}));
  EXPECT_EQ(EventIds(Claim(store, 10, Names{"p"})), (Names{}));
  EXPECT_FALSE(store.lane("p", 0).owner);
}

TEST(PositionsClaimTest, AnUnsubscribedHandlerIsAnErrorAndNothingIsRead) {
  FakeStore store;
  EXPECT_TRUE(
      ThrowsCoreError([&] { Claim(store, 10, Names{"nope"}); }, ErrorCode::kUndefinedObject));
  EXPECT_TRUE(ThrowsCoreError([&] { Claim(store, 10, Names{""}); }, ErrorCode::kInvalidParameter));
  EXPECT_EQ(store.calls, (Names{"subscribed_handlers"}));
}

TEST(PositionsClaimTest, OldestWorkFirstAcrossLanes) {
  FakeStore store;
  store.publish("h", 1, "newer", std::nullopt, kNow - 10);
  store.publish("h", 2, "older", std::nullopt, kNow - 20);
  store.exceptions[{"h", 3, 1}] = {"oldest", std::nullopt, false, 1, 1, kNow - 30};
  store.publish("h", 3, "oldest");
  store.lane("h", 3).progress.acked_upto = 1;
  EXPECT_EQ(EventIds(Claim(store, 1)), (Names{"oldest"}));
  EXPECT_EQ(EventIds(Claim(store, 1, Names{"h"})), (Names{"older"}));
}

TEST(PositionsClaimTest, HeldLanesAreOfferedOldestWorkFirst) {
  FakeStore store;
  for (std::int16_t lane : {1, 2}) {
    store.lane("h", lane).owner = "w";
    store.lane("h", lane).binding = Mine();
  }
  store.publish("h", 1, "newer", std::nullopt, kNow - 10);
  store.publish("h", 2, "older", std::nullopt, kNow - 20);
  EXPECT_EQ(EventIds(Claim(store, 1)), (Names{"older"}));
}

TEST(LanesToTryTest, OnlyLanesWithWorkOldestFirstThenByHandlerAndLane) {
  auto probe = [](std::string handler, std::int16_t lane, std::optional<Position> position,
                  std::optional<std::int64_t> first, std::optional<std::int64_t> due) {
    LaneWorkProbe p;
    p.lane = {std::move(handler), lane};
    p.first_position = position;
    p.first_available_us = first;
    p.due_exception_us = due;
    return p;
  };
  const auto order = lanes_to_try({probe("b", 1, 3, 50, std::nullopt), probe("a", 9, {}, {}, {}),
                                   probe("a", 2, {}, std::nullopt, 40), probe("a", 1, 2, 50, {}),
                                   probe("a", 3, 5, 60, 10)});
  std::vector<std::pair<std::string, int>> got;
  for (const auto& r : order) got.push_back({r.handler, r.lane});
  EXPECT_EQ(got,
            (std::vector<std::pair<std::string, int>>{{"a", 3}, {"a", 2}, {"a", 1}, {"b", 1}}));
}

TEST(AcquirableLaneHasWorkTest, WindowWorkDueRowsOrAnExpiredLeasesRunningPositions) {
  LaneWorkProbe p;
  EXPECT_FALSE(acquirable_lane_has_work(p));
  p.first_position = 1;
  EXPECT_TRUE(acquirable_lane_has_work(p));
  p.progress.acked_upto = 1;
  EXPECT_FALSE(acquirable_lane_has_work(p)) << "a probe at or below the cursor is no work";
  p.first_position = 3;
  EXPECT_TRUE(acquirable_lane_has_work(p)) << "position 2 is absent: finishing it is work";
  p.first_position.reset();
  p.due_exception_us = 5;
  EXPECT_TRUE(acquirable_lane_has_work(p));
  p.due_exception_us.reset();
  p.first_position = 2;
  p.progress.in_flight = {2};
  EXPECT_FALSE(acquirable_lane_has_work(p)) << "a free lane's list runs nothing";
  p.has_owner = true;
  EXPECT_TRUE(acquirable_lane_has_work(p)) << "an expired lease's: its takeover is work";
  p.progress.in_flight.clear();
  p.retrying = {1};
  EXPECT_TRUE(acquirable_lane_has_work(p));
}

TEST(PositionsClaimTest, AcquisitionGoesInRoundsOfGrowingSizeFromWindowsFourTimesAsLarge) {
  FakeStore store;
  for (std::int16_t lane = 0; lane < 20; ++lane)
    store.publish("h", lane, "e" + std::to_string(lane), std::nullopt, kNow - 100 + lane);
  store.locked_elsewhere = {{"h", 1}, {"h", 2}};
  const auto claimed = Claim(store, 10);
  EXPECT_EQ(claimed.size(), 10u);
  ASSERT_GE(store.acquire_calls.size(), 2u);
  EXPECT_EQ(store.acquire_calls[0].second, 4);
  EXPECT_EQ(store.acquire_calls[0].first.size(), 16u);
  EXPECT_EQ(store.acquire_calls[1].second, 6) << "the remaining places, below 8";
  EXPECT_EQ(store.acquire_calls[1].first.front().lane, 6) << "after the last lane taken";
  EXPECT_FALSE(store.lane("h", 1).owner);
}

TEST(PositionsClaimTest, StepsRunInOrderAndWritesComeLast) {
  FakeStore store;
  store.lane("h", 0).owner = "w";
  store.lane("h", 0).binding = Mine();
  store.publish("h", 0, "a", std::nullopt, kNow + 1);  // deferred
  store.publish("h", 1, "b");
  Claim(store, 10);
  EXPECT_EQ(store.calls, (Names{"subscribed_handlers", "held_lanes", "lock_held", "read_lanes",
                                "lanes_with_work", "lock_acquirable", "read_lanes",
                                "insert_exceptions", "write_lanes"}));
}

// ---- writes and hand-backs ----

TEST(PositionsClaimTest, AnIdleHeldLaneIsHandedBackAndOneWithPendingRowsKept) {
  FakeStore store;
  store.publish("h", 0, "e1");
  store.publish("h", 1, "f1", "F");
  store.publish("h", 1, "f2", "F");
  Claim(store, 10);
  store.complete_all("h", 0);
  // Lane 1's f1 failed: a retry an hour ahead, so f2 will be parked behind it.
  FakeLane& l1 = store.lane("h", 1);
  l1.progress = finish_positions(l1.progress, {1}).progress;
  store.exceptions[{"h", 1, 1}] = {"f1", "F", false, 1, 1, kNow + 3'600'000'000LL};
  store.lane_writes.clear();
  EXPECT_TRUE(Claim(store, 10).empty());
  EXPECT_FALSE(store.lane("h", 0).owner) << "idle: handed back";
  EXPECT_EQ(store.lane("h", 0).epoch, 1) << "a hand-back does not move the epoch";
  EXPECT_EQ(store.lane("h", 1).owner, "w") << "a pending exception row keeps it held";
  EXPECT_EQ(store.lane("h", 1).progress.acked_upto, 2) << "f2 parked";
}

TEST(PositionsClaimTest, AHeldLaneThatRunsEverythingItCanIsNotRewritten) {
  FakeStore store;
  for (int i = 0; i < 40; ++i) store.publish("h", 0, "e" + std::to_string(i));
  Claim(store, 100);
  store.lane("h", 0).renewal_due = false;  // renewed by that claim
  store.lane_writes.clear();
  store.reads.clear();
  EXPECT_TRUE(Claim(store, 100).empty());
  EXPECT_TRUE(store.lane_writes.empty());
  EXPECT_TRUE(store.reads.empty()) << "a held lane without room is not even read";
}

TEST(PositionsClaimTest, AHeldLaneDueForRenewalIsRenewedWhileItRunsEverythingItCan) {
  // A runtime leaves the lanes it holds to its claims' renewals while they go on
  // (Store::claim_renews_held_lanes): a lane whose handlers outlive the lease must be
  // renewed by them, or it lapses and is taken over under its handlers.
  FakeStore store;
  for (int i = 0; i < 40; ++i) store.publish("h", 0, "e" + std::to_string(i));
  Claim(store, 100);
  store.lane("h", 0).renewal_due = true;
  store.lane_writes.clear();
  store.reads.clear();
  EXPECT_TRUE(Claim(store, 100).empty());
  ASSERT_EQ(store.lane_writes.size(), 1u);
  EXPECT_TRUE(store.lane_writes[0].write.hold);
  EXPECT_FALSE(store.lane_writes[0].write.new_holder);
  EXPECT_EQ(store.lane("h", 0).owner, std::optional<std::string>("w"));
  EXPECT_TRUE(store.reads.empty()) << "a held lane without room is renewed, not read";
  // The same with room: one delivery running, nothing else to pick.
  FakeStore one;
  one.publish("h", 0, "e0");
  ASSERT_EQ(Claim(one, 10).size(), 1u);
  one.lane("h", 0).renewal_due = true;
  one.lane_writes.clear();
  EXPECT_TRUE(Claim(one, 10).empty());
  ASSERT_EQ(one.lane_writes.size(), 1u);
  EXPECT_TRUE(one.lane_writes[0].write.hold);
  EXPECT_EQ(one.lane("h", 0).progress.in_flight.size(), 1u);
}

TEST(PositionsClaimTest, AClaimReadsOnlyTheHeldLanesItsBatchNeedsOldestWorkFirst) {
  FakeStore store;
  // 40 held lanes, none due for lease renewal, three deliveries each; lane 39's work is the
  // oldest, lane 0's the newest.
  for (std::int16_t lane = 0; lane < 40; ++lane) {
    store.hold("h", lane, "w", Mine());
    store.lane("h", lane).renewal_due = false;
    for (int i = 0; i < 3; ++i)
      store.publish("h", lane, "e" + std::to_string(lane) + "." + std::to_string(i), std::nullopt,
                    kNow - 1000 - lane);
  }
  Names ids = EventIds(Claim(store, 6));
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (Names{"e38.0", "e38.1", "e38.2", "e39.0", "e39.1", "e39.2"}));
  ASSERT_EQ(store.probes.size(), 1u);
  EXPECT_EQ(store.probes[0].size(), 40u) << "every held lane is probed";
  ASSERT_EQ(store.reads.size(), 1u);
  const std::vector<LaneKey> first_two{{"h", 39}, {"h", 38}};
  EXPECT_EQ(store.reads[0], first_two) << "only a chunk of 2 is read, oldest work first";
  ASSERT_EQ(store.locks.size(), 1u);
  EXPECT_EQ(store.locks[0], first_two) << "and only that chunk is locked";
  EXPECT_EQ(store.lock_waits, std::vector<bool>{false}) << "without waiting";
  EXPECT_EQ(store.calls,
            (Names{"subscribed_handlers", "held_lanes", "lock_held", "read_lanes", "write_lanes"}))
      << "the held lanes filled the batch: no free lane is looked for";
  for (const auto& w : store.lane_writes)
    EXPECT_TRUE(w.lane == 39 || w.lane == 38) << "lane " << w.lane << " was not touched";
}

TEST(PositionsClaimTest, IdleHeldLanesAreNeitherLockedNorWritten) {
  FakeStore store;
  // 20 held lanes with fresh leases: 19 idle (everything completed), lane 7 with a new
  // delivery, lane 3 due for renewal.
  for (std::int16_t lane = 0; lane < 20; ++lane)
    store.publish("h", lane, "old" + std::to_string(lane));
  Claim(store, 100);
  for (std::int16_t lane = 0; lane < 20; ++lane) {
    store.complete_all("h", lane);
    store.lane("h", lane).renewal_due = lane == 3;
  }
  store.publish("h", 7, "new");
  store.locks.clear();
  store.lane_writes.clear();
  EXPECT_EQ(EventIds(Claim(store, 100)), (Names{"new"}));
  ASSERT_EQ(store.locks.size(), 2u);
  EXPECT_EQ(store.locks[0], (std::vector<LaneKey>{{"h", 3}})) << "due for renewal: at once";
  EXPECT_EQ(store.locks[1], (std::vector<LaneKey>{{"h", 7}})) << "work: as the batch needs it";
  EXPECT_EQ(store.lock_waits, (std::vector<bool>{true, false}))
      << "only the first lock statement waits";
  for (const auto& w : store.lane_writes)
    EXPECT_TRUE(w.lane == 3 || w.lane == 7) << "lane " << w.lane << " was written";
  EXPECT_FALSE(store.lane("h", 3).owner) << "idle and due for renewal: handed back";
  EXPECT_EQ(store.lane("h", 0).owner, "w") << "idle with a fresh lease: kept as it is";
}

TEST(PositionsClaimTest, AnUndelayedDeliveryParkedBehindItsKeyIsDueByTheClaimsClock) {
  FakeStore store;
  store.publish("h", 0, "a", "K");
  store.exceptions[{"h", 0, 1}] = {"a", "K", false, 1, 1, kNow + 3'600'000'000LL};
  FakeLane& l = store.lane("h", 0);
  l.progress = finish_positions(l.progress, {1}).progress;  // a failed: retried in an hour
  // b was published by a transaction that began after the claim's.
  store.publish("h", 0, "b", "K", kNow + 50);
  store.deliveries[{"h", 0, 2}].due_when_visible = true;
  EXPECT_TRUE(Claim(store, 10).empty());
  const RowKey b{"h", 0, 2};
  ASSERT_EQ(store.exceptions.count(b), 1u) << "parked behind a";
  EXPECT_EQ(store.exceptions[b].available_at, kNow) << "due by the claim's clock";
}

TEST(PositionsClaimTest, AHeldLaneTakenMeanwhileIsPassedOver) {
  FakeStore store;
  store.hold("h", 0, "w", Mine());
  store.hold("h", 1, "w", Mine());
  store.lane("h", 0).renewal_due = false;
  store.lane("h", 1).renewal_due = false;
  store.publish("h", 0, "a", std::nullopt, kNow - 10);
  store.publish("h", 1, "b", std::nullopt, kNow - 5);
  // lane 0 changes hands between the unlocked read and the lock.
  store.before_lock = [&] { store.lane("h", 0).owner = "other"; };
  EXPECT_EQ(EventIds(Claim(store, 10)), (Names{"b"}));
  for (const auto& w : store.lane_writes) EXPECT_NE(w.lane, 0) << "not ours: not written";
}

TEST(PositionsClaimTest, AHeldLaneIsQuietOnlyWhenNothingButAPublishOrRequeueCanGiveItWork) {
  PositionsLane lane;
  lane.progress.acked_upto = 7;
  EXPECT_TRUE(held_lane_quiet(lane, {}, false));
  HeldLaneProbe window;
  window.window_since_us = kNow;
  EXPECT_FALSE(held_lane_quiet(lane, window, false)) << "a window delivery to decide";
  EXPECT_FALSE(held_lane_quiet(lane, {}, true)) << "an exception row, due or not";
  PositionsLane running = lane;
  running.progress.in_flight = {8};
  EXPECT_FALSE(held_lane_quiet(running, {}, false)) << "something in flight";
  PositionsLane finished = lane;
  finished.progress.done = {9};
  EXPECT_FALSE(held_lane_quiet(finished, {}, false)) << "finished above the cursor: 8 is not";
  PositionsLane retrying = lane;
  retrying.retrying = {3};
  EXPECT_FALSE(held_lane_quiet(retrying, {}, false)) << "an exception row being retried";
}

TEST(PositionsClaimTest, AHeldLaneLockedElsewhereIsLeftForALaterClaim) {
  FakeStore store;
  store.hold("h", 0, "w", Mine());
  store.hold("h", 1, "w", Mine());
  store.lane("h", 0).renewal_due = false;
  store.lane("h", 1).renewal_due = false;
  store.publish("h", 0, "a", std::nullopt, kNow - 10);
  store.publish("h", 1, "b", std::nullopt, kNow - 5);
  store.locked_elsewhere.insert({"h", 0});  // a completion of the lane in progress
  EXPECT_EQ(EventIds(Claim(store, 10)), (Names{"b"}));
  store.locked_elsewhere.clear();
  EXPECT_EQ(EventIds(Claim(store, 10)), (Names{"a"})) << "the next claim takes it";
}

TEST(PositionsClaimTest, ChunksOfHeldLanesGrowUntilTheBatchIsFull) {
  FakeStore store;
  // 30 held lanes with one keyed delivery pair each: one delivery per key per batch, so
  // each lane gives one.
  for (std::int16_t lane = 0; lane < 30; ++lane) {
    store.hold("h", lane, "w", Mine());
    store.lane("h", lane).renewal_due = false;
    store.publish("h", lane, "a" + std::to_string(lane), "K" + std::to_string(lane),
                  kNow - 100 + lane);
    store.publish("h", lane, "b" + std::to_string(lane), "K" + std::to_string(lane),
                  kNow - 100 + lane);
  }
  EXPECT_EQ(Claim(store, 20).size(), 20u);
  ASSERT_EQ(store.reads.size(), 2u) << "the first chunk's yield sizes the second";
  EXPECT_EQ(store.reads[0].size(), 2u);
  EXPECT_EQ(store.reads[1].size(), 18u) << "one delivery a lane: the 18 the batch still needs";
  EXPECT_EQ(store.reads[1].front(), (LaneKey{"h", 2})) << "along the order";
}

TEST(PositionsClaimTest, ChunksOfHeldLanesAtLeastDoubleWhenLanesYieldMore) {
  FakeStore store;
  // 30 held lanes with four unkeyed deliveries each: the first chunk of 2 gives 8, and
  // the 12 the batch still needs would take 3 lanes at that yield; the chunk doubles.
  for (std::int16_t lane = 0; lane < 30; ++lane) {
    store.hold("h", lane, "w", Mine());
    store.lane("h", lane).renewal_due = false;
    for (int i = 0; i < 4; ++i)
      store.publish("h", lane, "e" + std::to_string(lane) + "." + std::to_string(i), std::nullopt,
                    kNow - 100 + lane);
  }
  EXPECT_EQ(Claim(store, 20).size(), 20u);
  ASSERT_EQ(store.reads.size(), 2u);
  EXPECT_EQ(store.reads[0].size(), 2u);
  EXPECT_EQ(store.reads[1].size(), 4u);
}

TEST(PositionsClaimTest, AnIdleHeldLaneIsReadOnlyWhenItsRenewalIsDue) {
  FakeStore store;
  store.publish("h", 0, "e0");
  store.publish("h", 1, "e1");
  Claim(store, 10);
  store.complete_all("h", 0);
  store.complete_all("h", 1);
  store.lane("h", 0).renewal_due = false;  // idle, lease fresh: kept, untouched
  store.lane("h", 1).renewal_due = true;   // idle, renewal due: read and handed back
  store.reads.clear();
  store.lane_writes.clear();
  EXPECT_TRUE(Claim(store, 10).empty());
  ASSERT_EQ(store.reads.size(), 1u);
  EXPECT_EQ(store.reads[0], (std::vector<LaneKey>{{"h", 1}}));
  EXPECT_EQ(store.lane("h", 0).owner, "w");
  EXPECT_FALSE(store.lane("h", 1).owner);
  ASSERT_EQ(store.lane_writes.size(), 1u);
  EXPECT_EQ(store.lane_writes[0].lane, 1);
}

TEST(PositionsClaimTest, AnIdleHeldLaneStillInUseIsRenewedAtItsRenewal) {
  // At a steady rate a lane is idle between its deliveries most of the time: handed back at
  // its renewal, it would be acquired again at its next delivery, two lease writes for one.
  FakeStore store;
  store.publish("h", 0, "e0");
  store.publish("h", 1, "e1");
  Claim(store, 10);
  store.complete_all("h", 0);
  store.complete_all("h", 1);
  const std::int64_t epoch = store.lane("h", 1).epoch;
  store.lane("h", 0).renewal_due = true;  // idle, renewal due, nothing published since
  store.lane("h", 1).renewal_due = true;  // idle, renewal due, published into since
  store.lane("h", 1).in_use = true;
  store.lane_writes.clear();
  store.asked_in_use.clear();
  EXPECT_TRUE(Claim(store, 10).empty());
  EXPECT_EQ(store.asked_in_use, (std::vector<LaneKey>{{"h", 0}, {"h", 1}}));
  EXPECT_FALSE(store.lane("h", 0).owner) << "not in use: handed back";
  EXPECT_EQ(store.lane("h", 1).owner, "w") << "in use: kept";
  EXPECT_EQ(store.lane("h", 1).epoch, epoch) << "renewed, not acquired again";
  ASSERT_EQ(store.lane_writes.size(), 2u);
  EXPECT_TRUE(store.lane_writes[1].write.write && store.lane_writes[1].write.hold);
}

TEST(PositionsClaimTest, AnIdleLaneInUseStillGoesBackOneRenewalInFour) {
  // Renewed whenever in use, a lane its worker keeps busy would never reach a worker that
  // joins later: when its last finished position is a multiple of kInUseRotation, it goes
  // back all the same.
  FakeStore store;
  for (int i = 0; i < 4; ++i) store.publish("h", 0, "e" + std::to_string(i));
  store.publish("h", 1, "f0");
  ASSERT_EQ(Claim(store, 10).size(), 5u);
  store.complete_all("h", 0);
  store.complete_all("h", 1);
  ASSERT_EQ(last_finished(store.lane("h", 0).progress), 4);
  ASSERT_EQ(last_finished(store.lane("h", 1).progress), 1);
  for (int lane : {0, 1}) {
    store.lane("h", lane).renewal_due = true;
    store.lane("h", lane).in_use = true;
  }
  store.asked_in_use.clear();
  EXPECT_TRUE(Claim(store, 10).empty());
  EXPECT_FALSE(store.lane("h", 0).owner) << "in use, but its turn to go back";
  EXPECT_EQ(store.lane("h", 1).owner, "w") << "in use: renewed";
}

TEST(PositionsLaneWriteTest, InUseLanesRotateByTheirLastFinishedPosition) {
  EXPECT_TRUE(in_use_lane_rotates(0));
  EXPECT_FALSE(in_use_lane_rotates(1));
  EXPECT_FALSE(in_use_lane_rotates(kInUseRotation - 1));
  EXPECT_TRUE(in_use_lane_rotates(kInUseRotation));
  EXPECT_TRUE(in_use_lane_rotates(kInUseRotation * 1000));
  LaneProgress p;
  p.acked_upto = 6;
  EXPECT_EQ(last_finished(p), 6);
  p.done = {8, 9};
  EXPECT_EQ(last_finished(p), 9);
}

TEST(PositionsClaimTest, OnlyHeldLanesDueForRenewalAreAskedWhetherInUse) {
  // A lane acquired gets a new lease whatever it holds: asking about its use would be a
  // lookup per acquired lane for nothing.
  FakeStore store;
  store.publish("h", 0, "e0");
  store.publish("h", 1, "e1");
  EXPECT_EQ(Claim(store, 10).size(), 2u);  // both acquired
  EXPECT_TRUE(store.asked_in_use.empty());
  store.publish("h", 0, "e2");
  store.lane("h", 0).renewal_due = false;
  store.lane("h", 1).renewal_due = false;
  store.asked_in_use.clear();
  EXPECT_EQ(Claim(store, 10).size(), 1u);
  EXPECT_TRUE(store.asked_in_use.empty()) << "held, not due";
}

TEST(PositionsClaimTest, HeldLaneProbeAgreesWithTheRule) {
  // held_lane_probe over what read_lanes returns, against the store's probe_held, for lanes
  // with finished, running, absent, deferred and retried positions and exception rows due
  // or not.
  FakeStore store;
  for (std::int16_t lane = 0; lane < 6; ++lane)
    for (int i = 0; i < 5; ++i)
      store.publish("h", lane, "e" + std::to_string(lane) + std::to_string(i), std::nullopt,
                    kNow - 50 + 10 * i + lane);
  store.lane("h", 1).progress.acked_upto = 2;
  store.lane("h", 2).progress.done = {1, 3};
  store.lane("h", 2).progress.in_flight = {2};
  store.lane("h", 3).progress.in_flight = {1, 2, 3, 4, 5};
  store.lane("h", 4).progress.acked_upto = 5;
  store.exceptions[{"h", 4, 2}] = {"e41", std::nullopt, false, 1, 1, kNow - 5};
  store.exceptions[{"h", 4, 3}] = {"e42", std::nullopt, false, 1, 1, kNow - 7};
  store.exceptions[{"h", 4, 4}] = {"e43", std::nullopt, false, 1, 1, kNow + 9};
  store.exceptions[{"h", 4, 5}] = {"e44", std::nullopt, true, 5, 5, kNow - 9};
  store.lane("h", 5).progress.acked_upto = 5;
  store.lane("h", 5).retrying = {2};
  store.exceptions[{"h", 5, 2}] = {"e51", std::nullopt, false, 1, 2, kNow - 3};
  // Lane 6: key A's head is not due (the rows behind it are, and do not count); key B's is.
  store.publish("h", 6, "a1", "A");
  store.publish("h", 6, "a2", "A");
  store.publish("h", 6, "b1", "B");
  store.lane("h", 6).progress.acked_upto = 3;
  store.exceptions[{"h", 6, 1}] = {"a1", "A", false, 1, 1, kNow + 60};
  store.exceptions[{"h", 6, 2}] = {"a2", "A", false, 0, 0, kNow - 40};
  store.exceptions[{"h", 6, 3}] = {"b1", "B", false, 0, 0, kNow - 20};
  // Lane 7: key C's head is being retried: the key is blocked, its due rows do not count.
  store.publish("h", 7, "c1", "C");
  store.publish("h", 7, "c2", "C");
  store.lane("h", 7).progress.acked_upto = 2;
  store.lane("h", 7).retrying = {1};
  store.exceptions[{"h", 7, 1}] = {"c1", "C", false, 1, 1, kNow - 30};
  store.exceptions[{"h", 7, 2}] = {"c2", "C", false, 0, 0, kNow - 30};
  std::vector<PositionsLane> lanes;
  for (std::int16_t lane = 0; lane < 8; ++lane) {
    const FakeLane& l = store.lane("h", lane);
    lanes.push_back({"h", lane, 0, l.progress, l.retrying});
  }
  std::vector<const PositionsLane*> asked;
  for (const auto& l : lanes) asked.push_back(&l);
  const auto contents = store.read_lanes(asked);
  const auto probes = store.probe_held(asked);
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    const HeldLaneProbe rule = held_lane_probe(lanes[i], contents[i], kNow);
    EXPECT_EQ(probes[i].window_since_us, rule.window_since_us) << "lane " << i;
    EXPECT_EQ(probes[i].due_exception_us, rule.due_exception_us) << "lane " << i;
  }
  EXPECT_EQ(probes[2].window_since_us, kNow - 50 + 30 + 2)
      << "4 is the first neither done nor running";
  EXPECT_FALSE(probes[3].window_since_us) << "everything runs";
  EXPECT_EQ(probes[4].due_exception_us, kNow - 7) << "the earliest due row, not the dead one";
  EXPECT_FALSE(probes[5].due_exception_us) << "its only due row is being retried";
  EXPECT_EQ(probes[6].due_exception_us, kNow - 20) << "B's head; A's waits behind a row not due";
  EXPECT_FALSE(probes[7].due_exception_us) << "C's head is being retried";
}

TEST(PositionsClaimTest, AFreeLaneWhoseDueRowsWaitBehindTheirKeyIsNotAcquired) {
  FakeStore store;
  // A due exception row, but the lowest row of its key is not due yet: the lane's heads
  // hold no due row, so it has no work, and nothing is locked, read or written.
  store.publish("h", 0, "k1", "K");
  store.publish("h", 0, "k2", "K");
  store.exceptions[{"h", 0, 1}] = {"k1", "K", false, 1, 1, kNow + 100};
  store.exceptions[{"h", 0, 2}] = {"k2", "K", false, 0, 0, kNow - 1};
  store.lane("h", 0).progress.acked_upto = 2;
  store.lane("h", 0).epoch = 5;
  EXPECT_TRUE(Claim(store, 10).empty());
  EXPECT_EQ(store.calls.back(), "lanes_with_work") << "probed, not acquired";
  EXPECT_TRUE(store.lane_writes.empty());
  EXPECT_EQ(store.lane("h", 0).epoch, 5);
  EXPECT_FALSE(store.lane("h", 0).owner);
}

TEST(PositionsClaimTest, AFreeLaneThatOnlyDefersIsWrittenButNotKept) {
  FakeStore store;
  store.publish("h", 0, "later", std::nullopt, kNow + 10);
  EXPECT_TRUE(Claim(store, 10).empty());
  EXPECT_EQ(store.lane("h", 0).progress.acked_upto, 1);
  EXPECT_FALSE(store.lane("h", 0).owner);
  EXPECT_EQ(store.lane("h", 0).epoch, 0);
}

TEST(PositionsClaimTest, AbsentPositionsAreFinished) {
  FakeStore store;
  store.publish("h", 0, "e1");
  store.publish("h", 0, "e2");
  store.publish("h", 0, "e3");
  store.deliveries.erase({"h", 0, 2});  // rolled back: never written
  EXPECT_EQ(EventIds(Claim(store, 10)), (Names{"e1", "e3"}));
  EXPECT_EQ(store.lane("h", 0).progress.done, (PositionSet{2}));
}

TEST(PositionsLaneWriteTest, TheWriteOfEachOriginAndOutcome) {
  auto write = [](LaneOrigin origin, bool changed, bool runs, bool remaining) {
    return positions_lane_write(origin, 5, {changed, runs, remaining});
  };
  // Held: kept while running or with something left (its lease renewed once due), handed
  // back otherwise.
  LaneWrite w = write(LaneOrigin::kHeld, false, true, true);
  EXPECT_TRUE(w.write && w.hold && !w.new_holder);  // due: renewed
  EXPECT_EQ(w.epoch, 5);
  w = positions_lane_write(LaneOrigin::kHeld, 5, {false, true, true, false});
  EXPECT_FALSE(w.write);  // not due: left as it is
  EXPECT_TRUE(w.hold);
  w = positions_lane_write(LaneOrigin::kHeld, 5, {false, true, false, true});
  EXPECT_TRUE(w.write && w.hold);  // running only, due: renewed, not handed back
  w = write(LaneOrigin::kHeld, true, true, false);
  EXPECT_TRUE(w.write && w.hold && !w.new_holder);
  EXPECT_EQ(w.epoch, 5);
  w = write(LaneOrigin::kHeld, false, false, true);
  EXPECT_TRUE(w.write && w.hold);
  w = positions_lane_write(LaneOrigin::kHeld, 5, {false, false, true, false});
  EXPECT_FALSE(w.write);
  EXPECT_TRUE(w.hold);
  w = write(LaneOrigin::kHeld, false, false, false);
  EXPECT_TRUE(w.write);
  EXPECT_FALSE(w.hold);
  // Idle, due, but a delivery was published into it since its last renewal: renewed.
  w = positions_lane_write(LaneOrigin::kHeld, 5, {false, false, false, true, true});
  EXPECT_TRUE(w.write && w.hold && !w.new_holder);
  EXPECT_EQ(w.epoch, 5);
  // Idle but with more than the lease left: kept as it is, no write.
  w = positions_lane_write(LaneOrigin::kHeld, 5, {false, false, false, false});
  EXPECT_FALSE(w.write);
  EXPECT_TRUE(w.hold);
  w = positions_lane_write(LaneOrigin::kHeld, 5, {true, false, false, false});
  EXPECT_TRUE(w.write && w.hold && !w.new_holder);
  EXPECT_EQ(w.epoch, 5);
  // Free: acquired at a new epoch only when it runs something.
  w = write(LaneOrigin::kFree, true, true, true);
  EXPECT_TRUE(w.write && w.hold && w.new_holder);
  EXPECT_EQ(w.epoch, 6);
  w = write(LaneOrigin::kFree, true, false, true);
  EXPECT_TRUE(w.write);
  EXPECT_FALSE(w.hold);
  EXPECT_EQ(w.epoch, 5);
  w = write(LaneOrigin::kFree, false, false, true);
  EXPECT_FALSE(w.write);
  // Taken over: always written at a new epoch; held only when it runs something.
  for (LaneOrigin o : {LaneOrigin::kExpired, LaneOrigin::kOrphaned}) {
    w = write(o, false, false, true);
    EXPECT_TRUE(w.write);
    EXPECT_FALSE(w.hold);
    EXPECT_EQ(w.epoch, 6);
    w = write(o, true, true, true);
    EXPECT_TRUE(w.hold && w.new_holder);
  }
  EXPECT_FALSE(write(LaneOrigin::kOthers, true, true, true).write);
}

TEST(PositionsClaimTest, ADrainHandsOutEveryDeliveryOnceAndInKeyOrder) {
  FakeStore store;
  std::map<std::string, std::vector<std::string>> published;  // key -> event ids in order
  int n = 0;
  for (int round = 0; round < 30; ++round)
    for (std::int16_t lane = 0; lane < 4; ++lane) {
      const std::string key = "k" + std::to_string((round * 7 + lane) % 9);
      const std::string id = "e" + std::to_string(n++);
      store.publish("h", lane, id, key);
      published[key + "@" + std::to_string(lane)].push_back(id);
    }
  std::map<std::string, std::vector<std::string>> handled;
  std::set<std::string> seen;
  for (int i = 0; i < 200 && seen.size() < static_cast<std::size_t>(n); ++i) {
    for (const auto& c : Claim(store, 7)) {
      EXPECT_TRUE(seen.insert(c.event_id).second) << c.event_id << " handed out twice";
      handled[*c.key + "@" + std::to_string(c.token.lane)].push_back(c.event_id);
    }
    for (std::int16_t lane = 0; lane < 4; ++lane) store.complete_all("h", lane);
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(n));
  EXPECT_EQ(handled, published);
  for (std::int16_t lane = 0; lane < 4; ++lane) {
    Claim(store, 7);
    EXPECT_FALSE(store.lane("h", lane).owner) << "drained lanes go back";
  }
}

}  // namespace
}  // namespace relaybus::core

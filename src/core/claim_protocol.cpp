#include "claim_protocol.hpp"

#include <algorithm>

#include "batch_planner.hpp"
#include "claim_request.hpp"
#include "error.hpp"
#include "sql_quote.hpp"

namespace relaybus::core {

std::vector<Charge> charges_for(const std::vector<LostDelivery>& lost) {
  std::vector<Charge> charges;
  charges.reserve(lost.size());
  for (const auto& d : lost) {
    const FailureOutcome outcome = after_lost_attempt(clamped(d.policy), d.attempts);
    charges.push_back({d.handler, d.event_id, outcome.attempts, outcome.dead});
  }
  return charges;
}

bool has_pending_predecessor(std::int64_t sequence,
                             const std::vector<std::int64_t>& pending_sequences_of_key) noexcept {
  return std::any_of(pending_sequences_of_key.begin(), pending_sequences_of_key.end(),
                     [&](std::int64_t s) { return s < sequence; });
}

void validate_requested_handlers(const std::optional<std::vector<std::string>>& requested) {
  if (requested) {
    for (const auto& h : *requested) validate_name("handler name", h);
  }
}

std::vector<std::string> handlers_to_claim(const std::optional<std::vector<std::string>>& requested,
                                           const std::vector<SubscribedHandler>& subscribed) {
  if (requested) {
    for (const auto& h : *requested) {
      const bool found = std::any_of(subscribed.begin(), subscribed.end(),
                                     [&](const SubscribedHandler& s) { return s.name == h; });
      if (!found)
        throw Error(ErrorCode::kUndefinedObject, "handler \"" + h + "\" is not subscribed",
                    "Subscribe it first with relaybus.subscribe(" + sql_literal(h) + ", ...).");
    }
  }
  // A paused handler is subscribed (asking for it is no error: a worker keeps running
  // through a pause and gets its work again on resume), but none of its lanes is kept,
  // taken over or acquired, so nothing of it is handed out. Its lanes already held stay
  // held, their in-flight attempts end as usual, and a takeover of an expired one is left
  // to take_over_expired, which charges those attempts whether or not it is paused.
  std::vector<std::string> handlers;
  for (const auto& s : subscribed)
    if (!s.paused) handlers.push_back(s.name);
  return handlers;
}

void charge_in_flight(ChargeStore& store, const std::vector<const LaneSnapshot*>& lanes) {
  std::vector<DeliveryRef> lost;
  for (const LaneSnapshot* lane : lanes)
    for (const auto& id : lane->in_flight) lost.push_back({lane->handler, id});
  if (lost.empty()) return;
  const std::vector<Charge> charges = charges_for(store.lock_lost(lost));
  if (!charges.empty()) store.write_charges(charges);
}

namespace {

struct LaneInClaim {
  LaneSnapshot lane;
  LaneOrigin origin = LaneOrigin::kFree;
  std::vector<std::string> picks;  // event ids claimed into this lane now
  LaneWrite write;
  // kConditionalWrites: lost deliveries to charge once the lane's write took effect.
  std::vector<std::string> to_charge;
  bool written = true;  // its write took effect (or it had none)
};

struct Pick {
  std::size_t lane_index;
  CandidateRow row;
};

class Claim {
 public:
  Claim(ClaimStore& store, int batch_size, bool caller_has_holder)
      : store_(store),
        planner_(batch_size),
        caller_has_holder_(caller_has_holder),
        conditional_(store.concurrency() == LaneConcurrency::kConditionalWrites) {}

  std::vector<ClaimedDelivery> run(const std::optional<std::vector<std::string>>& requested) {
    resolve_handlers(requested);
    if (handlers_.empty()) return {};
    keep_held_lanes();
    acquire_lanes();
    write_lanes();
    if (conditional_) {
      charge_lost();
      pick_charged();
    }
    return claimed();
  }

 private:
  void resolve_handlers(const std::optional<std::vector<std::string>>& requested) {
    validate_requested_handlers(requested);
    handlers_ = handlers_to_claim(requested, store_.subscribed_handlers(requested));
  }

  void keep_held_lanes() {
    std::vector<LaneRef> take_over;
    for (auto& held : store_.held_lanes(handlers_)) {
      const LaneOrigin origin = classify_held_lane(held.binding, caller_has_holder_);
      if (origin == LaneOrigin::kHeld) {
        for (const auto& key : held.in_flight_keys) planner_.key_in_flight(held.lane.handler, key);
        lanes_.push_back({std::move(held.lane), origin, {}, {}, {}, true});
        if (conditional_) take_lost(lanes_.back(), /*in_flight_too=*/false);
      } else if (charges_in_flight(origin)) {
        take_over.push_back({held.lane.handler, held.lane.lane});
      }  // kOthers: another live incarnation's, left alone
    }
    if (!take_over.empty()) {
      const std::size_t first = lanes_.size();
      for (auto& snapshot : store_.lock_for_takeover(take_over))
        lanes_.push_back({std::move(snapshot), LaneOrigin::kOrphaned, {}, {}, {}, true});
      charge_from(first, lanes_.size());
    }
    offer_candidates(0);
  }

  void acquire_lanes() {
    if (planner_.full()) return;
    const std::vector<LaneRef> work = store_.lanes_with_work(handlers_);
    std::size_t next = 0;
    for (int round = 0; !planner_.full() && next < work.size(); ++round) {
      const int wanted = lanes_to_acquire(round, planner_.remaining());
      // Each round looks at a window of the list four times the lanes it wants, so lanes
      // that others took or locked meanwhile are passed over in the same call, and goes on
      // after the last lane it took (or after the window, if it fell short).
      const std::size_t end = std::min(work.size(), next + 4 * static_cast<std::size_t>(wanted));
      const std::vector<LaneRef> window(work.begin() + next, work.begin() + end);
      std::vector<AcquiredLane> got = store_.lock_acquirable(window, wanted);
      next = got.size() < static_cast<std::size_t>(wanted) || got.empty()
                 ? end
                 : next + got.back().window_position;
      const std::size_t first = lanes_.size();
      std::vector<const LaneSnapshot*> expired;
      for (auto& a : got) {
        // A free lane's list is what its last holder left: nothing of it runs.
        if (!a.had_owner) a.lane.in_flight.clear();
        lanes_.push_back({std::move(a.lane),
                          a.had_owner ? LaneOrigin::kExpired : LaneOrigin::kFree,
                          {},
                          {},
                          {},
                          true});
        if (conditional_ && !a.had_owner) take_lost(lanes_.back(), /*in_flight_too=*/false);
      }
      charge_from(first, lanes_.size());
      offer_candidates(first);
    }
  }

  // kConditionalWrites: what the lane owes is charged after its write (its in-flight
  // deliveries too, for a takeover), and stays out of this claim.
  static void take_lost(LaneInClaim& lane, bool in_flight_too) {
    lane.to_charge = std::move(lane.lane.lost);
    lane.lane.lost.clear();
    if (!in_flight_too) return;
    lane.to_charge.insert(lane.to_charge.end(), lane.lane.in_flight.begin(),
                          lane.lane.in_flight.end());
    lane.lane.in_flight.clear();
  }

  // Charges the in-flight deliveries of lanes_[first, last) that a takeover took; a lane
  // taken over runs none of them any more. kConditionalWrites: after the write, instead.
  void charge_from(std::size_t first, std::size_t last) {
    if (conditional_) {
      for (std::size_t i = first; i < last; ++i)
        if (charges_in_flight(lanes_[i].origin)) take_lost(lanes_[i], /*in_flight_too=*/true);
      return;
    }
    std::vector<const LaneSnapshot*> taken;
    for (std::size_t i = first; i < last; ++i)
      if (charges_in_flight(lanes_[i].origin)) taken.push_back(&lanes_[i].lane);
    charge_in_flight(store_, taken);
    for (std::size_t i = first; i < last; ++i)
      if (charges_in_flight(lanes_[i].origin)) lanes_[i].lane.in_flight.clear();
  }

  // Offers the due deliveries of lanes_[first..] to the planner, in due order.
  void offer_candidates(std::size_t first) {
    std::vector<std::size_t> indexes;
    for (std::size_t i = first; i < lanes_.size(); ++i) indexes.push_back(i);
    offer_candidates(indexes);
  }

  // Offers the due deliveries of these lanes to the planner, in due order.
  //
  // A store returns, of each lane's first due deliveries, at most the batch's remaining
  // places in all and at most the read window asked of each lane (its room at first). The
  // planner may refuse a row for its key (a requeued head whose key has a later delivery in
  // flight), and such a row took a place that other due work could have had. So while the
  // batch has room and a round refused a row for its key, the lanes are asked again
  // without the refused rows, with the limit doubled and, for each lane that had one, its
  // window widened past its room by twice what it had: a long run of refused heads costs a
  // few rounds, not one per head. A round that refuses nothing for its key, the usual case,
  // is the last. A row beyond a lane's room is not a refusal: that lane is full. (The rounds
  // are bounded too, so a store that returned excluded rows could not loop forever.)
  void offer_candidates(const std::vector<std::size_t>& indexes) {
    constexpr int kMaxRounds = 24;
    std::vector<std::vector<std::string>> refused(indexes.size());
    std::vector<int> widened(indexes.size(), 0);  // read window beyond the room, per lane
    int limit = planner_.remaining();
    for (int round = 0; round < kMaxRounds && !indexes.empty() && !planner_.full(); ++round) {
      std::vector<CandidateLane> asked;
      for (std::size_t n = 0; n < indexes.size(); ++n) {
        const LaneInClaim& lane = lanes_[indexes[n]];
        CandidateLane c;
        c.lane = &lane.lane;
        c.excluded = lane.lane.in_flight;
        c.excluded.insert(c.excluded.end(), lane.to_charge.begin(), lane.to_charge.end());
        c.excluded.insert(c.excluded.end(), lane.picks.begin(), lane.picks.end());
        c.excluded.insert(c.excluded.end(), refused[n].begin(), refused[n].end());
        const int room = lane_room(lane.lane.in_flight.size() + lane.picks.size());
        c.room = room == 0 ? 0 : room + widened[n];
        asked.push_back(std::move(c));
      }
      std::vector<int> refused_now(indexes.size(), 0);
      bool any_refused = false;
      for (auto& row : store_.candidates(asked, limit)) {
        if (planner_.full()) break;
        if (row.lane_index >= indexes.size())
          throw Error(ErrorCode::kInternal, "relaybus: a candidate of a lane not asked for");
        const std::size_t index = indexes[row.lane_index];
        LaneInClaim& lane = lanes_[index];
        Candidate candidate;
        candidate.handler = &lane.lane.handler;
        candidate.key = &row.key;
        candidate.has_pending_predecessor = row.has_pending_predecessor;
        candidate.lane_in_flight = lane.lane.in_flight.size() + lane.picks.size();
        if (lane_room(candidate.lane_in_flight) == 0) continue;  // the lane is full
        if (!planner_.offer(candidate)) {
          refused[row.lane_index].push_back(std::move(row.event_id));
          ++refused_now[row.lane_index];
          any_refused = true;
          continue;
        }
        lane.picks.push_back(row.event_id);
        picks_.push_back({index, std::move(row)});
      }
      if (!any_refused) return;
      limit = widened_limit(limit, planner_.remaining());
      for (std::size_t n = 0; n < indexes.size(); ++n)
        if (refused_now[n] > 0) widened[n] = widened_limit(std::max(widened[n], refused_now[n]), 0);
    }
  }

  // Twice `last`, at least `at_least`, and bounded so that it stays an int.
  static int widened_limit(int last, int at_least) {
    constexpr int kMaxLimit = 1 << 20;
    return std::max(at_least, last > kMaxLimit / 2 ? kMaxLimit : 2 * last);
  }

  void write_lanes() {
    std::vector<LaneUpdate> updates;
    std::vector<std::size_t> updated;  // the lane of each update
    for (std::size_t i = 0; i < lanes_.size(); ++i) {
      LaneInClaim& lane = lanes_[i];
      lane.write = plan_lane_write(lane.origin, lane.lane.epoch, !lane.lane.in_flight.empty(),
                                   !lane.picks.empty());
      // What a lane owes is due again once charged: the claim keeps the lane to run it
      // (pick_charged), as a locking store's claim would have picked it.
      if (!lane.to_charge.empty() && lane.write.write) {
        lane.write.hold = true;
        lane.write.new_holder = lane.write.new_holder || lane.origin != LaneOrigin::kHeld;
      }
      // A lane that owes charges records them with its write, so that a claim dying before
      // it charged them leaves them to the lane's next holder.
      if (!lane.write.write && lane.to_charge.empty()) continue;
      if (!lane.write.write) {
        lane.write.write = true;
        lane.write.hold = lane.origin == LaneOrigin::kHeld;  // as it was
      }
      LaneUpdate u{lane.lane.handler, lane.lane.lane, lane.write, {},
                   lane.lane.epoch,   lane.to_charge};
      if (lane.write.hold) {
        u.in_flight = lane.lane.in_flight;
        u.in_flight.insert(u.in_flight.end(), lane.picks.begin(), lane.picks.end());
      }
      updates.push_back(std::move(u));
      updated.push_back(i);
    }
    if (updates.empty()) return;
    const std::vector<bool> took = store_.write_lanes(updates);
    if (took.size() != updates.size())
      throw Error(ErrorCode::kInternal, "relaybus: the store reported " +
                                            std::to_string(took.size()) + " lane writes of " +
                                            std::to_string(updates.size()));
    for (std::size_t u = 0; u < updated.size(); ++u) {
      if (took[u]) continue;
      if (!conditional_)
        throw Error(ErrorCode::kInternal, "relaybus: a locked lane's write did not take effect");
      // Another claim got there first: this one gives up the lane's picks.
      lanes_[updated[u]].written = false;
    }
    picks_.erase(std::remove_if(picks_.begin(), picks_.end(),
                                [&](const Pick& p) { return !lanes_[p.lane_index].written; }),
                 picks_.end());
  }

  // kConditionalWrites: the deliveries just charged are due again (a takeover applies no
  // backoff), so the lanes that owed them are offered once more, and what they yield is
  // written to them, conditional on the epoch this claim wrote: the batch is the same as
  // a locking store's claim would have made.
  void pick_charged() {
    std::vector<std::size_t> charged;
    for (std::size_t i = 0; i < lanes_.size(); ++i) {
      LaneInClaim& lane = lanes_[i];
      if (!lane.written || lane.to_charge.empty()) continue;
      lane.to_charge.clear();
      if (lane.write.hold) charged.push_back(i);
    }
    const std::size_t before = picks_.size();
    offer_candidates(charged);
    if (picks_.size() == before) return;
    std::vector<LaneUpdate> updates;
    std::vector<std::size_t> updated;
    for (std::size_t i : charged) {
      const LaneInClaim& lane = lanes_[i];
      if (std::none_of(picks_.begin() + static_cast<std::ptrdiff_t>(before), picks_.end(),
                       [&](const Pick& p) { return p.lane_index == i; }))
        continue;
      LaneWrite w;
      w.write = true;
      w.hold = true;
      w.epoch = lane.write.epoch;
      LaneUpdate u{lane.lane.handler, lane.lane.lane, w, lane.lane.in_flight, lane.write.epoch, {}};
      u.in_flight.insert(u.in_flight.end(), lane.picks.begin(), lane.picks.end());
      updates.push_back(std::move(u));
      updated.push_back(i);
    }
    const std::vector<bool> took = store_.write_lanes(updates);
    if (took.size() != updates.size())
      throw Error(ErrorCode::kInternal, "relaybus: the store reported " +
                                            std::to_string(took.size()) + " lane writes of " +
                                            std::to_string(updates.size()));
    std::vector<std::size_t> refused;
    for (std::size_t u = 0; u < updated.size(); ++u)
      if (!took[u]) refused.push_back(updated[u]);
    // A lane lost since its first write keeps only the picks that write recorded.
    picks_.erase(std::remove_if(picks_.begin() + static_cast<std::ptrdiff_t>(before), picks_.end(),
                                [&](const Pick& p) {
                                  return std::find(refused.begin(), refused.end(), p.lane_index) !=
                                         refused.end();
                                }),
                 picks_.end());
  }

  // kConditionalWrites: charges what the lanes whose write took effect owe, then clears
  // their lost lists.
  void charge_lost() {
    std::vector<LaneSnapshot> owed;
    std::vector<LaneRef> refs;
    std::vector<std::int64_t> epochs;
    for (const auto& lane : lanes_) {
      if (!lane.written || lane.to_charge.empty()) continue;
      owed.push_back({lane.lane.handler, lane.lane.lane, lane.write.epoch, lane.to_charge, {}});
      refs.push_back({lane.lane.handler, lane.lane.lane});
      epochs.push_back(lane.write.epoch);
    }
    if (owed.empty()) return;
    std::vector<const LaneSnapshot*> lanes;
    for (const auto& o : owed) lanes.push_back(&o);
    charge_in_flight(store_, lanes);
    store_.clear_lost(refs, epochs);
  }

  std::vector<ClaimedDelivery> claimed() {
    std::vector<ClaimedDelivery> out;
    out.reserve(picks_.size());
    for (auto& p : picks_) {
      const LaneInClaim& lane = lanes_[p.lane_index];
      LeaseToken token{lane.lane.lane, lane.write.epoch, p.row.claims, lane.lane.handler,
                       std::move(p.row.event_id)};
      out.push_back({std::move(token), std::move(p.row.key), p.row.attempts});
    }
    return out;
  }

  ClaimStore& store_;
  BatchPlanner planner_;
  bool caller_has_holder_;
  bool conditional_;  // LaneConcurrency::kConditionalWrites
  std::vector<std::string> handlers_;
  std::vector<LaneInClaim> lanes_;
  std::vector<Pick> picks_;
};

}  // namespace

std::vector<ClaimedDelivery> run_claim(ClaimStore& store,
                                       const std::optional<std::vector<std::string>>& requested,
                                       int batch_size, bool caller_has_holder) {
  return Claim(store, batch_size, caller_has_holder).run(requested);
}

}  // namespace relaybus::core

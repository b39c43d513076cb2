#include "positions_claim.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <utility>

#include "error.hpp"

namespace relaybus::core {

bool acquirable_lane_has_work(const LaneWorkProbe& probe) noexcept {
  if (probe.first_position && lane_has_work(probe.progress, *probe.first_position)) return true;
  if (probe.due_exception_us) return true;
  return probe.has_owner && (!probe.progress.in_flight.empty() || !probe.retrying.empty());
}

std::optional<std::int64_t> work_since(std::optional<std::int64_t> window_since_us,
                                       std::optional<std::int64_t> due_exception_us) noexcept {
  if (!window_since_us) return due_exception_us;
  if (!due_exception_us) return window_since_us;
  return std::min(*window_since_us, *due_exception_us);
}

HeldLaneProbe held_lane_probe(const PositionsLane& lane, const LaneContents& contents,
                              std::int64_t now_us) {
  const LaneProgress& p = lane.progress;
  HeldLaneProbe probe;
  for (const auto& d : contents.window) {
    if (d.position <= p.acked_upto || p.done.count(d.position) != 0 ||
        p.in_flight.count(d.position) != 0)
      continue;
    probe.window_since_us = d.available_at_us;
    break;
  }
  // Only heads count: the lowest pending row of a key (the rows behind it wait for it) and
  // every unkeyed row; pending is ascending by position.
  KeySet seen;
  for (const auto& x : contents.pending) {
    if (x.key && !seen.insert(*x.key).second) continue;
    if (x.available_at_us <= now_us && lane.retrying.count(x.position) == 0)
      probe.due_exception_us =
          std::min(x.available_at_us, probe.due_exception_us.value_or(x.available_at_us));
  }
  return probe;
}

bool held_lane_quiet(const PositionsLane& lane, const HeldLaneProbe& probe,
                     bool has_pending_rows) noexcept {
  return !probe.window_since_us && !has_pending_rows && lane.progress.done.empty() &&
         lane.progress.in_flight.empty() && lane.retrying.empty();
}

std::vector<LaneRef> lanes_to_try(std::vector<LaneWorkProbe> probes) {
  struct Ranked {
    std::int64_t since;
    LaneRef lane;
  };
  std::vector<Ranked> ranked;
  for (auto& p : probes) {
    if (!acquirable_lane_has_work(p)) continue;
    const auto since = work_since(p.first_available_us, p.due_exception_us);
    ranked.push_back({since.value_or(std::numeric_limits<std::int64_t>::max()), std::move(p.lane)});
  }
  std::sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) {
    if (a.since != b.since) return a.since < b.since;
    if (a.lane.handler != b.lane.handler) return a.lane.handler < b.lane.handler;
    return a.lane.lane < b.lane.lane;
  });
  std::vector<LaneRef> out;
  out.reserve(ranked.size());
  for (auto& r : ranked) out.push_back(std::move(r.lane));
  return out;
}

LaneTakeover take_over_positions_lane(const PositionsLane& lane,
                                      const std::vector<PendingException>& rows,
                                      const RetryPolicy& policy, std::int64_t now_us) {
  LaneTakeover t;
  const PositionsTakeover window = takeover_of_positions(lane.progress, policy, now_us);
  for (const LostPosition& p : window.charged)
    t.lost.push_back({lane.handler, lane.lane, p.position, p.dead, p.attempts,
                      kClaimsAfterWindowAttempt, p.available_at_us, /*lease_lost=*/true});
  const RetryPolicy rule = clamped(policy);
  for (Position position : lane.retrying) {
    const auto row = std::find_if(rows.begin(), rows.end(), [&](const PendingException& r) {
      return r.position == position;
    });
    if (row == rows.end()) continue;  // its attempt ended meanwhile: nothing to charge
    const FailureOutcome outcome = after_lost_attempt(rule, row->attempts);
    t.retries.push_back({lane.handler, lane.lane, position, outcome.attempts, outcome.dead,
                         now_us + outcome.delay_us});
  }
  t.progress = window.progress;
  t.epoch = plan_lane_write(LaneOrigin::kExpired, lane.epoch, /*has_live_in_flight=*/false,
                            /*got_picks=*/false)
                .epoch;
  return t;
}

std::vector<std::size_t> pick_exceptions(const std::vector<PendingException>& pending,
                                         const PositionSet& retrying, const KeySet& keys_in_flight,
                                         const KeySet& keys_in_batch, int room,
                                         std::int64_t now_us) {
  std::vector<std::size_t> picked;
  if (room <= 0) return picked;
  std::vector<std::size_t> order(pending.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return pending[a].position < pending[b].position;
  });
  // A key being retried, running in the window or already in the batch takes nothing more.
  KeySet blocked = keys_in_flight;
  blocked.insert(keys_in_batch.begin(), keys_in_batch.end());
  for (const auto& row : pending)
    if (row.key && retrying.count(row.position) != 0) blocked.insert(*row.key);
  KeySet seen;  // keys whose lowest pending row has been decided
  for (std::size_t index : order) {
    const PendingException& row = pending[index];
    if (row.key) {
      if (!seen.insert(*row.key).second) continue;  // not the lowest of its key
      if (blocked.count(*row.key) != 0) continue;
    }
    if (retrying.count(row.position) != 0) continue;
    if (row.available_at_us > now_us) continue;
    picked.push_back(index);
    if (--room == 0) break;
  }
  std::sort(picked.begin(), picked.end(), [&](std::size_t a, std::size_t b) {
    return pending[a].position < pending[b].position;
  });
  return picked;
}

LaneWrite positions_lane_write(LaneOrigin origin, std::int64_t epoch,
                               const LaneOutcome& outcome) noexcept {
  if (origin == LaneOrigin::kOthers) return plan_lane_write(origin, epoch, false, false);
  if (origin == LaneOrigin::kHeld) {
    // Kept while it runs something or has something left; once it has neither, kept until
    // its lease is due for renewal and then handed back (a write), so that idle lanes do not
    // stay hidden from other workers for longer than half a lease, nor cost a write per
    // claim while they are briefly idle; but renewed instead while deliveries still come
    // (LeaseRenewal::in_use_since_us).
    const bool keeps = outcome.runs_something || outcome.has_remaining ||
                       !outcome.lease_renewal_due || outcome.in_use;
    LaneWrite w = plan_lane_write(origin, epoch, /*has_live_in_flight=*/keeps,
                                  /*got_picks=*/false);
    // One kept while its lease is due is written to renew it, running or not: a runtime
    // leaves the renewal of the lanes it holds to its claims while they go on
    // (Store::claim_renews_held_lanes), so a lane whose handler outlives the lease would
    // otherwise lapse and be taken over under it.
    w.write = w.write || outcome.changed || (w.hold && outcome.lease_renewal_due);
    return w;
  }
  // Acquired in this claim (free, expired or orphaned): held only if it runs something, at
  // a new epoch; otherwise a free lane is written only for what changed and stays free, and
  // a lane taken over is written anyway (its takeover) and handed back.
  LaneWrite w = plan_lane_write(origin, epoch, /*has_live_in_flight=*/false,
                                /*got_picks=*/outcome.runs_something);
  w.write = w.write || outcome.changed;
  return w;
}

bool in_use_lane_rotates(Position last_finished) noexcept {
  return last_finished % kInUseRotation == 0;
}

namespace {

// A delivery picked into the batch.
struct Pick {
  Position position = 0;
  std::string event_id;
  std::optional<std::string> key;
  std::int32_t attempts = 0;
  std::int32_t claims = 0;
};

struct LaneInClaim {
  PositionsLane lane;  // as read, then as the claim leaves it (progress, retrying)
  LaneOrigin origin = LaneOrigin::kFree;
  const RetryPolicy* policy = nullptr;
  bool read = false;
  LaneContents contents;  // pending rows kept up to date with the claim's decisions
  bool changed = false;
  std::vector<Pick> picks;
  LaneWrite write;
};

// Inserts `row` into `rows` (ascending by position), replacing a row of its position.
void put_pending(std::vector<PendingException>& rows, PendingException row) {
  auto it = std::lower_bound(rows.begin(), rows.end(), row.position,
                             [](const PendingException& r, Position p) { return r.position < p; });
  if (it != rows.end() && it->position == row.position) {
    *it = std::move(row);
  } else {
    rows.insert(it, std::move(row));
  }
}

const WindowDelivery* window_row(const LaneContents& contents, Position position) {
  auto it = std::lower_bound(contents.window.begin(), contents.window.end(), position,
                             [](const WindowDelivery& d, Position p) { return d.position < p; });
  return it != contents.window.end() && it->position == position ? &*it : nullptr;
}

class PositionsClaim {
 public:
  PositionsClaim(PositionsClaimStore& store, int batch_size, bool caller_has_holder)
      : store_(store), remaining_(batch_size), caller_has_holder_(caller_has_holder) {}

  std::vector<PositionsClaimed> run(const std::optional<std::vector<std::string>>& requested) {
    validate_requested_handlers(requested);
    const std::vector<PositionsHandler> subscribed = store_.subscribed_handlers(requested);
    std::vector<SubscribedHandler> subscriptions;
    for (const auto& h : subscribed) {
      subscriptions.push_back(h.subscription);
      policies_[h.subscription.name] = h.policy;
    }
    handlers_ = handlers_to_claim(requested, subscriptions);
    if (handlers_.empty()) return {};
    now_us_ = store_.now_us();
    keep_held_lanes();
    acquire_lanes();
    write();
    return claimed();
  }

 private:
  void add_lane(PositionsLane lane, LaneOrigin origin) {
    LaneInClaim l;
    l.lane = std::move(lane);
    l.origin = origin;
    // A lane acquired or taken over is written at a new lease anyway: nothing to renew, so
    // nothing for read_lanes to find out about its use (LaneContents::in_use).
    if (origin != LaneOrigin::kHeld) l.lane.lease_renewal_due = false;
    const auto it = policies_.find(l.lane.handler);
    l.policy = it == policies_.end() ? &default_policy_ : &it->second;
    lanes_.push_back(std::move(l));
  }

  // The held lanes, read unlocked with their probes (held_lanes), and locked only where the
  // claim acts on them. First, waiting for them, those to take over and those due for lease
  // renewal (the claim's first lock statement: it holds no lane yet). Then those with room
  // whose probe found work, oldest work first, a chunk at a time as the batch needs them,
  // without waiting: a lane another transaction holds (a completion in progress) is left for
  // a later claim, so the claim never waits while it holds lanes out of the one order. The
  // others (idle, or full and fresh) are left as they are, unlocked and unwritten: a worker
  // may hold every lane of a handler while a claim needs a few, and a lock per lane per
  // claim is a WAL record and a step each.
  void keep_held_lanes() {
    std::vector<LaneRef> at_once;
    std::vector<std::pair<std::int64_t, LaneRef>> later;
    for (auto& held : store_.held_lanes(handlers_)) {
      const LaneOrigin origin = classify_held_lane(held.binding, caller_has_holder_);
      if (origin == LaneOrigin::kOthers) continue;  // another live incarnation's
      const LaneRef ref{held.lane.handler, held.lane.lane};
      if (origin == LaneOrigin::kHeld && !held.lane.lease_renewal_due) {
        const LaneProgress& g = held.lane.progress;
        // Without room it runs something and stays as it is.
        if (lane_room(g.in_flight.size() + held.lane.retrying.size()) == 0) continue;
        const auto since = work_since(held.probe.window_since_us, held.probe.due_exception_us);
        if (since) later.push_back({*since, ref});  // no work: left alone
        continue;
      }
      at_once.push_back(ref);
    }
    // Lanes to take over and lanes due for renewal are read whatever they hold (a takeover
    // charges what they ran; an idle lane due for renewal goes back, which takes its
    // contents to know); a held one without room is not read, only renewed.
    std::vector<std::size_t> must_read;
    for (const std::size_t i : lock_held(at_once, /*wait=*/true)) {
      const LaneInClaim& l = lanes_[i];
      if (l.origin != LaneOrigin::kHeld ||
          lane_room(l.lane.progress.in_flight.size() + l.lane.retrying.size()) != 0)
        must_read.push_back(i);
    }
    read(must_read);
    // In one order, oldest work first: the lanes read (by what they hold) and those to lock
    // (by their probe). kNotLocked: not locked yet; kPassed: not locked by this claim.
    constexpr std::size_t kNotLocked = static_cast<std::size_t>(-1);
    constexpr std::size_t kPassed = static_cast<std::size_t>(-2);
    struct Entry {
      std::optional<std::int64_t> since;
      std::size_t index;
      LaneRef ref;
    };
    std::vector<Entry> order;
    for (std::size_t i : must_read) {
      const HeldLaneProbe p = held_lane_probe(lanes_[i].lane, lanes_[i].contents, now_us_);
      order.push_back({work_since(p.window_since_us, p.due_exception_us), i, {}});
    }
    for (const auto& [since, ref] : later) order.push_back({since, kNotLocked, ref});
    std::stable_sort(order.begin(), order.end(), [](const Entry& a, const Entry& b) {
      const auto max = std::numeric_limits<std::int64_t>::max();
      return a.since.value_or(max) < b.since.value_or(max);
    });
    // Locked and read in chunks along the order: first enough for the batch at a full lane's
    // room each, at least 2; then, while the batch still has room, as many as the lanes
    // planned so far yielded a delivery for the rest, at least twice the last chunk. A lane
    // read is a window of up to kPositionWindow rows: a claim of ten that read eight windows
    // when every lane had a backlog read 500 rows for its ten; a claim of a hundred when
    // every lane has one or two (a busy handler's keys spread over its lanes) would take
    // five statements of doubling chunks, a lock and a read each, where two do.
    std::size_t chunk = std::max<std::size_t>(
        2, static_cast<std::size_t>(std::max(remaining_, 0)) / kMaxInFlightPerLane + 1);
    const int wanted = remaining_;
    std::size_t planned = 0;  // lanes planned so far
    bool first_chunk = true;
    for (std::size_t k = 0; k < order.size() && remaining_ > 0; ++k) {
      if (order[k].index == kNotLocked) {
        if (!first_chunk) {
          const auto got = static_cast<std::size_t>(wanted - remaining_);
          const auto rest = static_cast<std::size_t>(remaining_);
          chunk = std::max(2 * chunk, got == 0 ? order.size() : (rest * planned + got - 1) / got);
        }
        first_chunk = false;
        std::vector<std::size_t> at;
        std::vector<LaneRef> refs;
        for (std::size_t j = k; j < order.size() && refs.size() < chunk; ++j) {
          if (order[j].index != kNotLocked) continue;
          at.push_back(j);
          refs.push_back(order[j].ref);
          order[j].index = kPassed;  // unless it is locked now
        }
        const std::vector<std::size_t> added = lock_held(refs, /*wait=*/false);
        for (std::size_t i : added)
          for (std::size_t j : at)
            if (order[j].ref.handler == lanes_[i].lane.handler &&
                order[j].ref.lane == lanes_[i].lane.lane)
              order[j].index = i;
        read(added);
      }
      if (order[k].index == kPassed) continue;
      plan(lanes_[order[k].index]);
      ++planned;
    }
  }

  // Locks held lanes (store_.lock_held), adds those still the caller's incarnation's to the
  // claim, and takes over those of its other incarnations (lock_for_takeover). Returns the
  // indexes in lanes_ of the lanes added. lock_for_takeover waits, but only for lanes this
  // claim has just locked itself: it strengthens its own lock, which nothing else holding
  // the lane can block (no other lock on lanes' rows is weaker than FOR NO KEY UPDATE).
  // A lane reached through a SKIP LOCKED chunk is the caller's own incarnation's when read,
  // so it is taken over only if that incarnation's lease expired meanwhile.
  std::vector<std::size_t> lock_held(const std::vector<LaneRef>& refs, bool wait) {
    std::vector<std::size_t> added;
    if (refs.empty()) return added;
    std::vector<LaneRef> take_over;
    for (auto& held : store_.lock_held(refs, wait)) {
      const LaneOrigin origin = classify_held_lane(held.binding, caller_has_holder_);
      if (origin == LaneOrigin::kHeld) {
        add_lane(std::move(held.lane), origin);
        added.push_back(lanes_.size() - 1);
      } else if (charges_in_flight(origin)) {
        take_over.push_back({held.lane.handler, held.lane.lane});
      }  // kOthers: another live incarnation's, left alone
    }
    if (!take_over.empty())
      for (auto& lane : store_.lock_for_takeover(take_over)) {
        add_lane(std::move(lane), LaneOrigin::kOrphaned);
        added.push_back(lanes_.size() - 1);
      }
    return added;
  }

  // Reads the lanes at `indexes` (into their contents) and takes over those that need it.
  void read(const std::vector<std::size_t>& indexes) {
    if (indexes.empty()) return;
    std::vector<const PositionsLane*> to_read;
    for (std::size_t i : indexes) to_read.push_back(&lanes_[i].lane);
    std::vector<LaneContents> contents = store_.read_lanes(to_read);
    if (contents.size() != indexes.size())
      throw Error(ErrorCode::kInternal, "relaybus: the store read " +
                                            std::to_string(contents.size()) + " lanes of " +
                                            std::to_string(indexes.size()));
    for (std::size_t n = 0; n < indexes.size(); ++n) {
      LaneInClaim& l = lanes_[indexes[n]];
      l.read = true;
      l.contents = std::move(contents[n]);
      if (charges_in_flight(l.origin)) take_over(l);
    }
  }

  void acquire_lanes() {
    if (remaining_ <= 0) return;
    const std::vector<LaneRef> work = lanes_to_try(store_.lanes_with_work(handlers_));
    std::size_t next = 0;
    for (int round = 0; remaining_ > 0 && next < work.size(); ++round) {
      const int wanted = lanes_to_acquire(round, remaining_);
      // As run_claim: each round looks at a window of the list four times the lanes it
      // wants, so lanes that others took or locked meanwhile are passed over in the same
      // call, and goes on after the last lane it took (or after the window, if it fell
      // short).
      const std::size_t end = std::min(work.size(), next + 4 * static_cast<std::size_t>(wanted));
      const std::vector<LaneRef> window(work.begin() + next, work.begin() + end);
      std::vector<AcquiredPositionsLane> got = store_.lock_acquirable(window, wanted);
      next = got.size() < static_cast<std::size_t>(wanted) || got.empty()
                 ? end
                 : next + got.back().window_position;
      const std::size_t first = lanes_.size();
      for (auto& a : got) {
        if (!a.had_owner) {
          // A free lane's lists are what its last holder left: nothing of it runs.
          a.lane.progress.in_flight.clear();
          a.lane.retrying.clear();
        }
        add_lane(std::move(a.lane), a.had_owner ? LaneOrigin::kExpired : LaneOrigin::kFree);
      }
      // Already in the list's order; each is read (acquired for its work).
      std::vector<std::size_t> indexes(lanes_.size() - first);
      std::iota(indexes.begin(), indexes.end(), first);
      read(indexes);
      for (std::size_t i : indexes) {
        if (remaining_ <= 0) break;
        plan(lanes_[i]);
      }
    }
  }

  // A takeover in this claim: charged as take_over_positions_lane decides; the rows it
  // makes or charges are pending rows of the lane for the rest of the claim.
  void take_over(LaneInClaim& l) {
    const LaneTakeover t = take_over_positions_lane(l.lane, l.contents.pending, *l.policy, now_us_);
    for (const NewException& row : t.lost) {
      new_rows_.push_back(row);
      const WindowDelivery* d = window_row(l.contents, row.position);
      if (row.dead || d == nullptr) continue;  // no delivery row: nothing is inserted
      put_pending(l.contents.pending, {row.position, d->event_id, d->key, row.available_at_us,
                                       row.attempts, row.claims});
    }
    for (const ExceptionCharge& charge : t.retries) {
      charges_.push_back(charge);
      auto& rows = l.contents.pending;
      auto it = std::find_if(rows.begin(), rows.end(), [&](const PendingException& r) {
        return r.position == charge.position;
      });
      if (it == rows.end()) continue;
      if (charge.dead) {
        rows.erase(it);
      } else {
        it->attempts = charge.attempts;
        it->claims = it->claims + 1;
        it->available_at_us = charge.available_at_us;
      }
    }
    l.lane.progress = t.progress;
    l.lane.retrying.clear();
    l.changed = true;
  }

  // The lane's picks, due exception rows first, then its window.
  void plan(LaneInClaim& l) {
    LaneProgress& progress = l.lane.progress;
    KeySet& batch_keys = batch_keys_[l.lane.handler];
    KeySet keys_in_flight;
    for (const auto& d : l.contents.window)
      if (d.key && progress.in_flight.count(d.position) != 0) keys_in_flight.insert(*d.key);

    const int exception_room =
        std::min(remaining_, lane_room(progress.in_flight.size() + l.lane.retrying.size()));
    for (std::size_t index : pick_exceptions(l.contents.pending, l.lane.retrying, keys_in_flight,
                                             batch_keys, exception_room, now_us_)) {
      const PendingException& row = l.contents.pending[index];
      l.lane.retrying.insert(row.position);
      if (row.key) batch_keys.insert(*row.key);
      l.picks.push_back({row.position, row.event_id, row.key, row.attempts, row.claims});
      --remaining_;
      l.changed = true;
    }

    // The window as plan_lane wants it: every position up to the last one read or the tail
    // (whichever is higher; within the window), absent where no delivery was read.
    const Position cursor = progress.acked_upto;
    Position last = std::max(l.contents.tail,
                             l.contents.window.empty() ? 0 : l.contents.window.back().position);
    last = std::min(last, cursor > std::numeric_limits<Position>::max() - kPositionWindow
                              ? std::numeric_limits<Position>::max()
                              : cursor + kPositionWindow);
    std::vector<WindowEntry> entries;
    std::vector<const WindowDelivery*> rows;  // per entry, its delivery (nullptr: absent)
    auto next = l.contents.window.begin();
    for (Position p = cursor; p < last;) {
      ++p;
      while (next != l.contents.window.end() && next->position < p) ++next;
      const bool found = next != l.contents.window.end() && next->position == p;
      if (!found && progress.done.count(p) != 0) continue;  // finished: may be left out
      WindowEntry e;
      e.position = p;
      e.exists = found;
      if (found) {
        e.key = next->key;
        e.available_at_us = next->available_at_us;
        e.due_when_visible = next->due_when_visible;
      }
      entries.push_back(std::move(e));
      rows.push_back(found ? &*next : nullptr);
    }
    KeySet pending_keys;
    for (const auto& x : l.contents.pending)
      if (x.key) pending_keys.insert(*x.key);
    const int window_room =
        std::min(remaining_, lane_room(progress.in_flight.size() + l.lane.retrying.size()));
    const LanePlan lane_plan =
        plan_lane(progress, entries, window_room, now_us_, pending_keys, batch_keys);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const WindowDelivery* d = rows[i];
      switch (lane_plan.actions[i]) {
        case WindowAction::kPick:
          if (d->key) batch_keys.insert(*d->key);
          l.picks.push_back({d->position, d->event_id, d->key, 0, 0});
          --remaining_;
          break;
        case WindowAction::kDefer:
        case WindowAction::kPark: {
          // A delivery due when visible is due now by this claim's clock too, whatever its
          // publisher's clock said, so that its row is not skipped as not yet due.
          const std::int64_t due =
              d->due_when_visible ? std::min(d->available_at_us, now_us_) : d->available_at_us;
          new_rows_.push_back({l.lane.handler, l.lane.lane, d->position, /*dead=*/false,
                               /*attempts=*/0, /*claims=*/0, due, /*lease_lost=*/false});
          put_pending(l.contents.pending, {d->position, d->event_id, d->key, due, 0, 0});
          break;
        }
        default:
          break;
      }
    }
    progress = lane_plan.progress;
    l.changed = l.changed || lane_plan.write;
  }

  void write() {
    std::vector<PositionsLaneWrite> writes;
    for (LaneInClaim& l : lanes_) {
      LaneOutcome outcome;
      outcome.changed = l.changed;
      outcome.runs_something = !l.lane.progress.in_flight.empty() || !l.lane.retrying.empty();
      // A lane not read (a held one without room) runs something anyway.
      outcome.has_remaining =
          !l.read || !lane_idle(l.lane.progress, l.contents.tail) || !l.contents.pending.empty();
      outcome.lease_renewal_due = l.lane.lease_renewal_due;
      outcome.in_use =
          l.read && l.contents.in_use && !in_use_lane_rotates(last_finished(l.lane.progress));
      l.write = positions_lane_write(l.origin, l.lane.epoch, outcome);
      if (!l.write.write) continue;
      writes.push_back({l.lane.handler, l.lane.lane, l.write, l.lane.progress, l.lane.retrying});
    }
    if (!new_rows_.empty()) store_.insert_exceptions(new_rows_);
    if (!charges_.empty()) store_.charge_exceptions(charges_);
    if (!writes.empty()) store_.write_lanes(writes);
  }

  std::vector<PositionsClaimed> claimed() {
    std::vector<PositionsClaimed> out;
    for (LaneInClaim& l : lanes_) {
      for (Pick& p : l.picks) {
        PositionToken token{l.lane.lane, l.write.epoch, p.position, p.claims, l.lane.handler};
        out.push_back({std::move(token), std::move(p.event_id), std::move(p.key), p.attempts});
      }
    }
    return out;
  }

  PositionsClaimStore& store_;
  int remaining_;
  bool caller_has_holder_;
  std::int64_t now_us_ = 0;
  std::vector<std::string> handlers_;
  std::map<std::string, RetryPolicy> policies_;
  const RetryPolicy default_policy_{};
  std::vector<LaneInClaim> lanes_;
  std::map<std::string, KeySet> batch_keys_;  // per handler: one delivery per key per batch
  std::vector<NewException> new_rows_;
  std::vector<ExceptionCharge> charges_;
};

}  // namespace

std::vector<PositionsClaimed> run_positions_claim(
    PositionsClaimStore& store, const std::optional<std::vector<std::string>>& requested,
    int batch_size, bool caller_has_holder) {
  return PositionsClaim(store, batch_size, caller_has_holder).run(requested);
}

int take_over_expired_positions(PositionsTakeoverStore& store,
                                const std::vector<ExpiredPositionsLane>& lanes,
                                std::int64_t now_us) {
  if (lanes.empty()) return 0;
  std::vector<const PositionsLane*> retrying;
  for (const auto& l : lanes)
    if (!l.lane.retrying.empty()) retrying.push_back(&l.lane);
  std::vector<std::vector<PendingException>> rows;
  if (!retrying.empty()) {
    rows = store.retrying_rows(retrying);
    if (rows.size() != retrying.size())
      throw Error(ErrorCode::kInternal, "relaybus: the store read the retried rows of " +
                                            std::to_string(rows.size()) + " lanes of " +
                                            std::to_string(retrying.size()));
  }
  std::vector<NewException> lost;
  std::vector<ExceptionCharge> charges;
  std::vector<PositionsLaneWrite> writes;
  const std::vector<PendingException> none;
  std::size_t next_rows = 0;
  for (const auto& l : lanes) {
    const auto& lane_rows = l.lane.retrying.empty() ? none : rows[next_rows++];
    const LaneTakeover t = take_over_positions_lane(l.lane, lane_rows, l.policy, now_us);
    lost.insert(lost.end(), t.lost.begin(), t.lost.end());
    charges.insert(charges.end(), t.retries.begin(), t.retries.end());
    // Handed back at the new epoch: nobody runs anything of it now.
    LaneOutcome outcome;
    outcome.changed = true;
    const LaneWrite w = positions_lane_write(LaneOrigin::kExpired, l.lane.epoch, outcome);
    writes.push_back({l.lane.handler, l.lane.lane, w, t.progress, {}});
  }
  if (!lost.empty()) store.insert_exceptions(lost);
  if (!charges.empty()) store.charge_exceptions(charges);
  store.write_lanes(writes);
  return static_cast<int>(lanes.size());
}

}  // namespace relaybus::core

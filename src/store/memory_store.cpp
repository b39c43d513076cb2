#include "memory_store.hpp"

#include <algorithm>
#include <ctime>
#include <random>

#include "core/claim_protocol.hpp"
#include "core/claim_request.hpp"
#include "core/due_time.hpp"
#include "core/error.hpp"
#include "core/expired_takeover.hpp"
#include "core/lane.hpp"
#include "core/republish.hpp"

namespace relaybus::store {

namespace {

using Clock = MemoryBus::Clock;

Clock::duration us(std::int64_t microseconds) {
  return std::chrono::microseconds(microseconds);
}

[[noreturn]] void invalid(const std::string& message) {
  throw StoreError(core::ErrorCode::kInvalidParameter, message);
}

// The payload must be a JSON object. This store does not parse JSON; it checks the shape
// a caller is most likely to get wrong (an array, a string, a number).
bool looks_like_object(const std::string& json) {
  const auto first = json.find_first_not_of(" \t\r\n");
  const auto last = json.find_last_not_of(" \t\r\n");
  return first != std::string::npos && json[first] == '{' && json[last] == '}';
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S+00", &tm);
  return text;
}

std::string new_event_id() {
  static thread_local std::mt19937_64 random{std::random_device{}()};
  static const char hex[] = "0123456789abcdef";
  std::string id;
  for (int i = 0; i < 32; ++i) {
    if (i == 8 || i == 12 || i == 16 || i == 20) id += '-';
    id += hex[random() & 15];
  }
  id[14] = '4';
  return id;
}

}  // namespace

// ---------------------------------------------------------------- the bus

MemoryBus::MemoryBus(core::LaneConcurrency concurrency)
    : now_([] { return Clock::now(); }), concurrency_(concurrency) {}

void MemoryBus::set_clock(std::function<Clock::time_point()> now) {
  std::lock_guard<std::mutex> lock(mutex_);
  now_ = std::move(now);
}

const MemoryBus::Delivery* MemoryBus::pending(const std::string& handler,
                                              const std::string& event_id) const {
  auto it = deliveries_.find({handler, event_id});
  return it == deliveries_.end() || it->second.dead ? nullptr : &it->second;
}

std::vector<std::string> MemoryBus::live_in_flight(const std::string& handler,
                                                   const Lane& lane) const {
  std::vector<std::string> live;
  for (const auto& id : lane.in_flight)
    if (core::counts_in_flight(pending(handler, id) != nullptr)) live.push_back(id);
  return live;
}

void MemoryBus::wait_settled(std::unique_lock<std::mutex>& lock, const std::string& handler,
                             const std::string& event_id) {
  settled_.wait(lock, [&] {
    auto it = deliveries_.find({handler, event_id});
    return it == deliveries_.end() || !it->second.completing;
  });
}

// ---------------------------------------------------------------- the claim's reads/writes

// core::ClaimStore on the bus, for one claim, under the bus's lock.
class MemoryClaimStore final : public core::ClaimStore {
 public:
  MemoryClaimStore(MemoryBus& bus, const Worker& worker, std::uint64_t instance,
                   std::chrono::milliseconds lease)
      : bus_(bus), worker_(worker), instance_(instance), lease_(lease), now_(bus.now()) {}

  core::LaneConcurrency concurrency() const override { return bus_.concurrency_; }

  void clear_lost(const std::vector<core::LaneRef>& lanes,
                  const std::vector<std::int64_t>& epochs) override {
    auto step = lock_step();
    for (std::size_t i = 0; i < lanes.size(); ++i) {
      auto& lane = bus_.lane(lanes[i].handler, lanes[i].lane);
      if (lane.epoch != epochs[i]) continue;
      lane.lost.clear();
      // Still as this claim last wrote it: the claim's next write may follow this one.
      // Changed meanwhile: that next write must find it changed.
      auto& seen = versions_[{lanes[i].handler, lanes[i].lane}];
      const bool unchanged = seen == lane.version;
      ++lane.version;
      if (unchanged) seen = lane.version;
    }
  }

  std::vector<core::SubscribedHandler> subscribed_handlers(
      const std::optional<std::vector<std::string>>& requested) override {
    auto step = lock_step();
    std::vector<core::SubscribedHandler> out;
    for (const auto& [handler, s] : bus_.subscriptions_) {
      if (!requested || std::binary_search(requested->begin(), requested->end(), handler))
        out.push_back({handler, bus_.paused_.count(handler) > 0});
    }
    return out;  // std::map: sorted
  }

  std::vector<core::HeldLane> held_lanes(const std::vector<std::string>& handlers) override {
    auto step = lock_step();
    std::vector<core::HeldLane> out;
    for (auto& [key, lane] : bus_.lanes_) {
      if (lane.owner != worker_.name ||
          !std::binary_search(handlers.begin(), handlers.end(), key.first))
        continue;
      core::HeldLane held;
      held.lane = snapshot(key, lane, bus_.live_in_flight(key.first, lane));
      held.binding.to_holder = lane.holder.has_value();
      held.binding.same_holder = lane.holder && *lane.holder == worker_.holder;
      held.binding.backend_alive =
          !lane.holder && lane.instance && bus_.live_instances_.count(*lane.instance) > 0;
      held.binding.lease_expired = lane.expires <= now_;
      for (const auto& id : held.lane.in_flight) {
        const auto* d = bus_.pending(key.first, id);
        if (d->key && std::find(held.in_flight_keys.begin(), held.in_flight_keys.end(), *d->key) ==
                          held.in_flight_keys.end())
          held.in_flight_keys.push_back(*d->key);
      }
      out.push_back(std::move(held));
    }
    return out;
  }

  std::vector<core::LaneSnapshot> lock_for_takeover(
      const std::vector<core::LaneRef>& lanes) override {
    auto step = lock_step();
    std::vector<core::LaneSnapshot> out;
    for (const auto& ref : lanes) {
      auto& lane = bus_.lane(ref.handler, ref.lane);
      // A completion in an open transaction keeps the lane: the PostgreSQL store waits for
      // it; one call here cannot wait under the lock, so the lane is left for a later claim.
      if (lane.pins > 0) continue;
      out.push_back(snapshot({ref.handler, ref.lane}, lane, lane.in_flight));
    }
    return out;
  }

  std::vector<core::LostDelivery> lock_lost(
      const std::vector<core::DeliveryRef>& deliveries) override {
    auto step = lock_step();
    std::vector<core::LostDelivery> out;
    for (const auto& ref : deliveries) {
      if (const auto* d = bus_.pending(ref.handler, ref.event_id))
        out.push_back({ref.handler, ref.event_id, d->attempts, policy_of(ref.handler)});
    }
    return out;
  }

  void write_charges(const std::vector<core::Charge>& charges) override {
    auto step = lock_step();
    for (const auto& c : charges) {
      auto& d = bus_.deliveries_.at({c.handler, c.event_id});
      d.attempts = c.attempts;
      d.dead = c.dead;
      ++d.claims;
      d.last_error = core::kLeaseLostError;
      d.updated_at = now_;
    }
  }

  std::vector<core::LaneRef> lanes_with_work(const std::vector<std::string>& handlers) override {
    auto step = lock_step();
    // The earliest pending delivery of each lane, as the PostgreSQL store's index walk.
    std::map<MemoryBus::LaneKey, Clock::time_point> earliest;
    for (const auto& [key, d] : bus_.deliveries_) {
      if (d.dead || !std::binary_search(handlers.begin(), handlers.end(), key.first)) continue;
      auto [it, fresh] = earliest.try_emplace({key.first, d.lane}, d.available_at);
      if (!fresh) it->second = std::min(it->second, d.available_at);
    }
    std::vector<std::pair<Clock::time_point, MemoryBus::LaneKey>> due;
    for (const auto& [lane_key, at] : earliest) {
      if (at <= now_ && acquirable(bus_.lane(lane_key.first, lane_key.second)))
        due.push_back({at, lane_key});
    }
    std::sort(due.begin(), due.end());
    std::vector<core::LaneRef> out;
    for (const auto& [at, k] : due) out.push_back({k.first, k.second});
    return out;
  }

  std::vector<core::AcquiredLane> lock_acquirable(const std::vector<core::LaneRef>& window,
                                                  int wanted) override {
    auto step = lock_step();
    std::vector<core::AcquiredLane> out;
    for (std::size_t i = 0; i < window.size() && static_cast<int>(out.size()) < wanted; ++i) {
      auto& lane = bus_.lane(window[i].handler, window[i].lane);
      if (!acquirable(lane) || lane.pins > 0) continue;  // pinned: as SKIP LOCKED
      out.push_back({snapshot({window[i].handler, window[i].lane}, lane, lane.in_flight),
                     lane.owner.has_value(), i + 1});
    }
    return out;
  }

  std::vector<core::CandidateRow> candidates(const std::vector<core::CandidateLane>& lanes,
                                             int limit) override {
    auto step = lock_step();
    struct Row {
      Clock::time_point at;
      core::CandidateRow row;
    };
    const auto by_due = [](const Row& a, const Row& b) {
      return a.at != b.at ? a.at < b.at : a.row.event_id < b.row.event_id;
    };
    std::vector<Row> all;
    for (std::size_t i = 0; i < lanes.size(); ++i) {
      const core::LaneSnapshot& lane = *lanes[i].lane;
      std::vector<Row> of_lane;
      for (auto it = bus_.deliveries_.lower_bound({lane.handler, std::string()});
           it != bus_.deliveries_.end() && it->first.first == lane.handler; ++it) {
        const auto& d = it->second;
        const std::string& id = it->first.second;
        if (d.dead || d.lane != lane.lane || d.available_at > now_) continue;
        if (std::find(lanes[i].excluded.begin(), lanes[i].excluded.end(), id) !=
            lanes[i].excluded.end())
          continue;
        // The per-key rule, answered here before the lane's limit, as the PostgreSQL
        // store's query does.
        if (d.key && core::has_pending_predecessor(d.sequence, sequences_of(lane.handler, d)))
          continue;
        of_lane.push_back({d.available_at, {i, id, d.key, d.attempts, d.claims, false}});
      }
      std::sort(of_lane.begin(), of_lane.end(), by_due);
      const auto take =
          std::min<std::size_t>(of_lane.size(), std::max(0, std::min(limit, lanes[i].room)));
      all.insert(all.end(), of_lane.begin(), of_lane.begin() + take);
    }
    std::sort(all.begin(), all.end(), by_due);
    if (all.size() > static_cast<std::size_t>(std::max(limit, 0))) all.resize(limit);
    std::vector<core::CandidateRow> out;
    for (auto& r : all) out.push_back(std::move(r.row));
    return out;
  }

  std::vector<bool> write_lanes(const std::vector<core::LaneUpdate>& updates) override {
    auto step = lock_step();
    std::vector<bool> took;
    for (const auto& u : updates) {
      auto& lane = bus_.lane(u.handler, u.lane);
      // Conditional on the epoch the claim read; and a lane with a completion in progress
      // does not change hands under it (in MongoDB the takeover's charge and the
      // completion write the same delivery documents, and one of them fails).
      const auto read = versions_.find({u.handler, u.lane});
      const bool applies =
          !conditional() ||
          (lane.epoch == u.read_epoch && read != versions_.end() && read->second == lane.version &&
           (lane.pins == 0 || u.write.epoch == lane.epoch));
      took.push_back(applies);
      if (!applies) continue;
      versions_[{u.handler, u.lane}] = ++lane.version;
      lane.epoch = u.write.epoch;
      lane.lost = u.lost;
      if (!u.write.hold) {
        lane.owner.reset();
        lane.holder.reset();
        lane.instance.reset();
        lane.in_flight.clear();
        continue;
      }
      lane.owner = worker_.name;
      lane.expires = now_ + lease_;
      if (u.write.new_holder) {
        lane.holder.reset();
        lane.instance.reset();
        if (worker_.holder.empty()) {
          lane.instance = instance_;
        } else {
          lane.holder = worker_.holder;
        }
      }
      lane.in_flight = u.in_flight;
    }
    return took;
  }

  // A lane as read now, outside a claim (the maintenance takeover), with its live
  // in-flight deliveries; its version is remembered for the conditional write.
  core::LaneSnapshot read_lane(const MemoryBus::LaneKey& key) {
    const auto& lane = bus_.lanes_.at(key);
    return snapshot(key, lane, bus_.live_in_flight(key.first, lane));
  }

 private:
  // A lane as read now; its version is remembered for the conditional write.
  core::LaneSnapshot snapshot(const MemoryBus::LaneKey& key, const MemoryBus::Lane& lane,
                              std::vector<std::string> in_flight) {
    versions_[key] = lane.version;
    return {key.first, key.second, lane.epoch, std::move(in_flight), lane.lost};
  }

  bool conditional() const {
    return bus_.concurrency_ == core::LaneConcurrency::kConditionalWrites;
  }

  // kConditionalWrites: each call is a step of its own, under the bus lock. kLocks: the
  // whole claim already holds it.
  std::unique_lock<std::mutex> lock_step() {
    return conditional() ? std::unique_lock<std::mutex>(bus_.mutex_)
                         : std::unique_lock<std::mutex>();
  }

  bool acquirable(const MemoryBus::Lane& lane) const {
    return core::acquirable(lane.owner.has_value(), lane.expires <= now_,
                            lane.owner == worker_.name);
  }

  std::vector<std::int64_t> sequences_of(const std::string& handler,
                                         const MemoryBus::Delivery& of) const {
    std::vector<std::int64_t> out;
    for (auto it = bus_.deliveries_.lower_bound({handler, std::string()});
         it != bus_.deliveries_.end() && it->first.first == handler; ++it) {
      const auto& d = it->second;
      if (!d.dead && d.lane == of.lane && d.key == of.key) out.push_back(d.sequence);
    }
    return out;
  }

  core::RetryPolicy policy_of(const std::string& handler) const {
    auto it = bus_.subscriptions_.find(handler);
    return it == bus_.subscriptions_.end() ? core::RetryPolicy{} : it->second.retry;
  }

  MemoryBus& bus_;
  const Worker& worker_;
  std::uint64_t instance_;
  std::chrono::milliseconds lease_;
  Clock::time_point now_;
  std::map<MemoryBus::LaneKey, std::int64_t> versions_;  // of each lane as read or written
};

// ---------------------------------------------------------------- transactions

class MemoryTransaction final : public Transaction {
 public:
  explicit MemoryTransaction(std::shared_ptr<MemoryBus> bus) : bus_(std::move(bus)) {}
  ~MemoryTransaction() override {
    if (open_) rollback();
  }

  bool complete(const std::string& token_text) override {
    return reported([&] {
      const core::LeaseToken token = core::parse_lease_token(token_text);
      std::unique_lock<std::mutex> lock(bus_->mutex_);
      bus_->wait_settled(lock, token.handler, token.event_id);
      if (!core::token_holds(token, fence_of(*bus_, token))) return false;
      ++bus_->lane(token.handler, token.lane).pins;
      bus_->deliveries_.at({token.handler, token.event_id}).completing = true;
      done_.push_back(token);
      return true;
    });
  }

  void commit() override { finish(true); }
  void rollback() override { finish(false); }

  static core::FenceView fence_of(MemoryBus& bus, const core::LeaseToken& token) {
    core::FenceView fence;
    auto lane = bus.lanes_.find({token.handler, token.lane});
    if (lane != bus.lanes_.end()) {
      fence.lane_found = true;
      fence.lane_epoch = lane->second.epoch;
      const auto& f = lane->second.in_flight;
      fence.listed_in_flight = std::find(f.begin(), f.end(), token.event_id) != f.end();
    }
    auto d = bus.deliveries_.find({token.handler, token.event_id});
    if (d != bus.deliveries_.end()) {
      fence.delivery_found = true;
      fence.delivery_pending = !d->second.dead;
      fence.delivery_claims = d->second.claims;
    }
    return fence;
  }

 private:
  void finish(bool commit) {
    std::lock_guard<std::mutex> lock(bus_->mutex_);
    if (!open_) return;
    open_ = false;
    for (const auto& token : done_) {
      --bus_->lane(token.handler, token.lane).pins;
      auto& d = bus_->deliveries_.at({token.handler, token.event_id});
      d.completing = false;
      // Still held: nothing could take the lane over or end the attempt meanwhile.
      if (commit && core::token_holds(token, fence_of(*bus_, token)))
        bus_->deliveries_.erase({token.handler, token.event_id});
    }
    bus_->settled_.notify_all();
  }

  std::shared_ptr<MemoryBus> bus_;
  std::vector<core::LeaseToken> done_;
  bool open_ = true;
};

// ---------------------------------------------------------------- the store

MemoryStore::MemoryStore(std::shared_ptr<MemoryBus> bus) : bus_(std::move(bus)) {
  std::lock_guard<std::mutex> lock(bus_->mutex_);
  instance_ = bus_->next_instance_++;
  bus_->live_instances_.insert(instance_);
  seen_publications_ = bus_->publications_;
}

MemoryStore::~MemoryStore() {
  std::lock_guard<std::mutex> lock(bus_->mutex_);
  bus_->live_instances_.erase(instance_);
}

std::vector<Delivery> MemoryStore::claim(const Worker& worker, int batch,
                                         std::chrono::milliseconds lease,
                                         const std::vector<std::string>& handlers) {
  return reported([&] {
    core::validate_worker(worker.name);
    core::validate_batch_size(batch);
    core::validate_lease(std::chrono::duration_cast<std::chrono::microseconds>(lease).count());
    std::optional<std::vector<std::string>> requested;
    if (!handlers.empty()) {
      requested = handlers;
      std::sort(requested->begin(), requested->end());
    }
    // kLocks: the whole claim is one step; kConditionalWrites: each of its calls is.
    std::unique_lock<std::mutex> lock(bus_->mutex_);
    const bool atomic = bus_->concurrency_ == core::LaneConcurrency::kLocks;
    MemoryClaimStore store(*bus_, worker, instance_, lease);  // reads the clock
    if (!atomic) lock.unlock();
    std::vector<core::ClaimedDelivery> claimed =
        core::run_claim(store, requested, batch, !worker.holder.empty());
    if (!atomic) lock.lock();
    std::vector<Delivery> out;
    for (auto& c : claimed) {
      const auto& event = bus_->events_.at(c.token.event_id);
      Delivery d;
      d.token = core::encode(c.token);
      d.event_id = c.token.event_id;
      d.handler = c.token.handler;
      d.type = event.type;
      d.has_key = c.key.has_value();
      d.key = c.key.value_or("");
      d.payload = event.payload;
      d.attempts = c.attempts;
      d.published_at = event.published_at;
      out.push_back(std::move(d));
    }
    return out;
  });
}

int MemoryStore::complete_many(const std::vector<std::string>& tokens) {
  return reported([&] {
    std::vector<core::LeaseToken> parsed;
    for (const auto& t : tokens) parsed.push_back(core::parse_lease_token(t));
    std::unique_lock<std::mutex> lock(bus_->mutex_);
    int n = 0;
    for (const auto& token : parsed) {
      bus_->wait_settled(lock, token.handler, token.event_id);
      if (!core::token_holds(token, MemoryTransaction::fence_of(*bus_, token))) continue;
      // Deleted; the lane's in-flight list is pruned lazily, as in the PostgreSQL store.
      bus_->deliveries_.erase({token.handler, token.event_id});
      ++n;
    }
    return n;
  });
}

core::AttemptResult MemoryStore::end(const std::string& token_text, core::Ending ending,
                                     const std::string& error,
                                     std::optional<std::chrono::milliseconds> retry_after) {
  return reported([&] {
    const core::LeaseToken token = core::parse_lease_token(token_text);
    std::unique_lock<std::mutex> lock(bus_->mutex_);
    bus_->wait_settled(lock, token.handler, token.event_id);
    const core::FenceView fence = MemoryTransaction::fence_of(*bus_, token);
    auto it = bus_->deliveries_.find({token.handler, token.event_id});
    const std::int32_t attempts = it == bus_->deliveries_.end() ? 0 : it->second.attempts;
    auto sub = bus_->subscriptions_.find(token.handler);
    const core::RetryPolicy policy =
        sub == bus_->subscriptions_.end() ? core::RetryPolicy{} : sub->second.retry;
    const core::AttemptEnd end =
        core::end_attempt(ending, token, fence, policy, attempts, retry_after.has_value());
    if (end.result == core::AttemptResult::kLost) return end.result;
    auto& d = it->second;
    d.dead = end.dead;
    d.attempts = end.attempts;
    d.updated_at = bus_->now();
    ++d.claims;
    if (end.result == core::AttemptResult::kRetry)
      d.available_at = bus_->now() + (retry_after ? *retry_after : us(end.delay_us));
    if (ending != core::Ending::kRelease && !error.empty()) d.last_error = error;
    auto& f = bus_->lane(token.handler, token.lane).in_flight;
    f.erase(std::remove(f.begin(), f.end(), token.event_id), f.end());
    ++bus_->lane(token.handler, token.lane).version;
    return end.result;
  });
}

FailOutcome MemoryStore::fail(const std::string& token, const std::string& error,
                              std::optional<std::chrono::milliseconds> retry_after) {
  if (retry_after)
    retry_after = std::chrono::milliseconds(core::checked_delay_ms(
        retry_after->count(), core::kDefaultMaxDelayUs, "retry_after", "the store's maximum delay"));
  switch (end(token, core::Ending::kFail, error, retry_after)) {
    case core::AttemptResult::kRetry:
      return FailOutcome::kRetry;
    case core::AttemptResult::kDead:
      return FailOutcome::kDead;
    default:
      return FailOutcome::kLost;
  }
}

bool MemoryStore::bury(const std::string& token, const std::string& error) {
  return end(token, core::Ending::kBury, error, std::nullopt) != core::AttemptResult::kLost;
}

bool MemoryStore::release(const std::string& token) {
  return end(token, core::Ending::kRelease, "", std::nullopt) != core::AttemptResult::kLost;
}

int MemoryStore::relinquish(const Worker& worker) {
  return reported([&] {
    core::validate_worker(worker.name);
    std::lock_guard<std::mutex> lock(bus_->mutex_);
    int n = 0;
    for (auto& [key, lane] : bus_->lanes_) {
      if (lane.owner != worker.name) continue;
      const bool same = lane.holder && *lane.holder == worker.holder;
      if (!core::relinquish_covers(lane.holder.has_value(), same, !worker.holder.empty())) continue;
      if (!core::relinquishes(bus_->live_in_flight(key.first, lane).size())) continue;
      ++lane.version;
      lane.owner.reset();
      lane.holder.reset();
      lane.instance.reset();
      lane.in_flight.clear();
      ++n;
    }
    return n;
  });
}

int MemoryStore::extend_lease(const Worker& worker, std::chrono::milliseconds lease) {
  return reported([&] {
    core::validate_worker(worker.name);
    core::validate_lease(std::chrono::duration_cast<std::chrono::microseconds>(lease).count());
    std::lock_guard<std::mutex> lock(bus_->mutex_);
    int n = 0;
    for (auto& [key, lane] : bus_->lanes_) {
      if (lane.owner != worker.name) continue;
      core::LaneBinding binding;
      binding.to_holder = lane.holder.has_value();
      binding.same_holder = lane.holder && *lane.holder == worker.holder;
      binding.backend_alive =
          !lane.holder && lane.instance && bus_->live_instances_.count(*lane.instance) > 0;
      if (!core::is_callers(binding, !worker.holder.empty())) continue;
      lane.expires = bus_->now() + lease;
      ++n;
    }
    return n;
  });
}

void MemoryStore::listen() {
  listening_ = true;
}

bool MemoryStore::wait_for_wakeup(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(bus_->mutex_);
  const bool woke = bus_->published_.wait_for(
      lock, timeout, [&] { return listening_ && bus_->publications_ != seen_publications_; });
  seen_publications_ = bus_->publications_;
  return woke;
}

std::unique_ptr<Transaction> MemoryStore::begin() {
  return std::make_unique<MemoryTransaction>(bus_);
}

void MemoryStore::check_publishable(const Event& event) const {
  reported([&] {
    core::validate_name("type", event.type);
    if (event.key) core::validate_name("key", *event.key);
    if (event.event_id) core::validate_name("event_id", *event.event_id);
    if (event.handlers) {
      for (const auto& h : *event.handlers) {
        core::validate_name("handler name", h);
        if (bus_->subscriptions_.count(h) == 0)
          throw core::Error(core::ErrorCode::kUndefinedObject,
                            "handler \"" + h + "\" is not subscribed");
      }
    }
  });
  if (!looks_like_object(event.payload)) invalid("payload must be a JSON object");
  if (event.delay && event.delay->count() < 0) invalid("delay must not be negative");
  // The seam takes delays, never negative: only the maximum of core's due-time rule applies.
  if (event.delay)
    core::checked_delay_ms(event.delay->count(), core::kDefaultMaxDelayUs, "delay",
                           "the store's maximum delay");
}

std::string MemoryStore::publish_locked(const Event& in) {
  const std::string event_id = in.event_id ? *in.event_id : new_event_id();
  auto existing = bus_->events_.find(event_id);
  const std::string& type = existing == bus_->events_.end() ? in.type : existing->second.type;
  std::vector<std::string> targets;
  if (in.handlers) {
    targets = *in.handlers;
  } else {
    for (const auto& [handler, s] : bus_->subscriptions_)
      if (core::subscribes_to(s.event_types, type)) targets.push_back(handler);
  }
  std::vector<std::string> added;
  if (existing == bus_->events_.end()) {
    added = core::handlers_to_add(targets, {});
    bus_->events_[event_id] = {in.type, in.key, in.payload, added, utc_now(), bus_->now()};
  } else {
    added = core::handlers_to_add(targets, existing->second.handlers);
    auto& had = existing->second.handlers;
    had.insert(had.end(), added.begin(), added.end());
  }
  const MemoryBus::Event& event = bus_->events_.at(event_id);
  const Clock::time_point due = bus_->now() + in.delay.value_or(std::chrono::milliseconds(0));
  // One sequence number per publish of a keyed event, shared by its new deliveries.
  const std::int64_t sequence = event.key && !added.empty() ? ++bus_->key_counters_[*event.key] : 0;
  for (const auto& handler : added) {
    MemoryBus::Delivery d;
    d.key = event.key;  // the stored event's: its lane and order
    d.lane = core::lane_of(event.key ? *event.key : event_id);
    d.sequence = sequence;
    d.available_at = due;
    d.created_at = d.updated_at = bus_->now();
    d.created_wall_us = std::chrono::duration_cast<std::chrono::microseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    bus_->deliveries_[{handler, event_id}] = d;
  }
  if (!added.empty()) ++bus_->publications_;
  return event_id;
}

std::string MemoryStore::publish(const Event& event) {
  std::lock_guard<std::mutex> lock(bus_->mutex_);
  check_publishable(event);
  const std::string id = publish_locked(event);
  bus_->published_.notify_all();
  return id;
}

std::vector<std::string> MemoryStore::publish_batch(const std::vector<Event>& events) {
  std::lock_guard<std::mutex> lock(bus_->mutex_);
  // Every event is checked before any is published: all or none.
  for (std::size_t i = 0; i < events.size(); ++i) {
    try {
      check_publishable(events[i]);
    } catch (const StoreError& e) {
      throw StoreError(e.code(), "events[" + std::to_string(i) + "]: " + e.what());
    }
  }
  std::vector<std::string> ids;
  for (const auto& e : events) ids.push_back(publish_locked(e));
  bus_->published_.notify_all();
  return ids;
}

void MemoryStore::subscribe(const Subscription& s) {
  reported([&] {
    core::validate_name("handler name", s.handler);
    if (s.event_types.empty())
      throw core::Error(core::ErrorCode::kInvalidParameter, "event_types must not be empty");
    for (const auto& t : s.event_types) core::validate_name("event type", t);
    core::validate(s.retry);
  });
  std::lock_guard<std::mutex> lock(bus_->mutex_);
  bus_->subscriptions_[s.handler] = s;
}

bool MemoryStore::requeue(const std::string& event_id, const std::string& handler) {
  std::lock_guard<std::mutex> lock(bus_->mutex_);
  auto it = bus_->deliveries_.find({handler, event_id});
  if (it == bus_->deliveries_.end() || !core::requeues(it->second.dead)) return false;
  auto& d = it->second;
  d.dead = false;
  d.attempts = core::kRequeuedAttempts;
  ++d.claims;
  d.available_at = d.updated_at = bus_->now();
  ++bus_->publications_;
  bus_->published_.notify_all();
  return true;
}

int MemoryStore::take_over_expired() {
  std::unique_lock<std::mutex> lock(bus_->mutex_);
  const Worker nobody;  // hands lanes back: no worker is written
  MemoryClaimStore store(*bus_, nobody, instance_, std::chrono::milliseconds(0));
  std::vector<core::LaneSnapshot> expired;
  for (const auto& [key, lane] : bus_->lanes_) {
    // A lane with a completion in progress is left for a later round, as PostgreSQL's
    // SKIP LOCKED leaves it.
    if (core::due_for_takeover(lane.owner.has_value(), lane.expires <= bus_->now()) &&
        lane.pins == 0)
      expired.push_back(store.read_lane(key));
  }
  // kConditionalWrites: each step of the takeover takes the lock itself, as a claim's do.
  if (bus_->concurrency_ == core::LaneConcurrency::kConditionalWrites) lock.unlock();
  return core::take_over_expired_lanes(store, expired);
}

std::optional<DeliveryState> MemoryStore::lookup(const std::string& event_id,
                                                 const std::string& handler) {
  std::lock_guard<std::mutex> lock(bus_->mutex_);
  auto it = bus_->deliveries_.find({handler, event_id});
  if (it == bus_->deliveries_.end()) return std::nullopt;
  return DeliveryState{it->second.dead ? "dead" : "pending", it->second.attempts};
}

}  // namespace relaybus::store

// MongoStore's worker half (mongo_store.hpp).
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <map>
#include <thread>

#include "commands.hpp"
#include "completion.hpp"
#include "core/attempt_end.hpp"
#include "core/claim_protocol.hpp"
#include "core/claim_request.hpp"
#include "core/due_time.hpp"
#include "core/lane_lease.hpp"
#include "core/lease_token.hpp"
#include "documents.hpp"
#include "driver.hpp"
#include "lanes.hpp"
#include "mongo_claim_store.hpp"
#include "mongo_store.hpp"
#include "mongo_transaction.hpp"

namespace relaybus::mongo {

using namespace detail;

namespace {

std::string utc_text(std::int64_t ms) {
  const std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[48];
  const std::size_t n = std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &tm);
  std::snprintf(text + n, sizeof text - n, ".%03d+00", static_cast<int>(ms % 1000));
  return text;
}

}  // namespace

std::vector<store::Delivery> MongoStore::claim(const store::Worker& worker, int batch,
                                               std::chrono::milliseconds lease,
                                               const std::vector<std::string>& handlers) {
  std::optional<std::vector<std::string>> requested;
  reported([&] {
    core::validate_worker(worker.name);
    core::validate_batch_size(batch);
    core::validate_lease(std::chrono::duration_cast<std::chrono::microseconds>(lease).count());
  });
  if (!handlers.empty()) {
    requested = handlers;
    std::sort(requested->begin(), requested->end());
  }
  MongoClaimStore claims(client_, database_, worker.name, holder_of(worker), lease.count());
  // Every Worker has a holder here (the process's when it passes none).
  std::vector<core::ClaimedDelivery> claimed =
      reported([&] { return core::run_claim(claims, requested, batch, true); });
  if (claimed.empty()) return {};
  std::vector<std::string> ids;
  for (const auto& c : claimed) ids.push_back(c.token.event_id);
  std::map<std::string, ClaimedEvent> events;
  for (const auto& d :
       find_all(client_, database_, nullptr, commands::find_events(ids), "find events")) {
    ClaimedEvent e = reported([&] { return read_claimed_event(d.get()); });
    std::string id = e.id;
    events.emplace(std::move(id), std::move(e));
  }
  std::vector<store::Delivery> out;
  for (auto& c : claimed) {
    auto e = events.find(c.token.event_id);
    if (e == events.end())
      throw StoreError(
          core::ErrorCode::kInternal,
          "relaybus MongoDB store: a delivery of a missing event: " + c.token.event_id);
    store::Delivery d;
    d.token = core::encode(c.token);
    d.event_id = c.token.event_id;
    d.handler = c.token.handler;
    d.type = e->second.type;
    d.has_key = c.key.has_value();
    d.key = c.key.value_or("");
    d.payload = e->second.payload;
    d.attempts = c.attempts;
    d.published_at = utc_text(e->second.created_at_ms);
    out.push_back(std::move(d));
  }
  return out;
}

int MongoStore::complete_many(const std::vector<std::string>& tokens) {
  const std::vector<core::LeaseToken> parsed = parse_tokens(tokens);
  if (parsed.empty()) return 0;
  int n = 0;
  in_transaction([&](mongoc_client_session_t* session) {
    n = 0;
    n = complete_in(client_, database_, session, parsed, options_.completion_history);
  });
  return n;
}

core::AttemptResult MongoStore::end(const std::string& token_text, core::Ending ending,
                                    const std::string& error,
                                    std::optional<std::chrono::milliseconds> retry_after) {
  const core::LeaseToken token = parse_tokens({token_text}).front();
  core::AttemptResult result = core::AttemptResult::kLost;
  in_transaction([&](mongoc_client_session_t* session) {
    result = core::AttemptResult::kLost;
    const auto lanes =
        lanes_by_id(find_all(client_, database_, session,
                             commands::find_lanes({{token.handler, token.lane}}), "find lane"));
    const auto deliveries = deliveries_of(find_all(
        client_, database_, session,
        commands::find_deliveries({{token.handler, token.event_id}}, false), "find delivery"));
    core::RetryPolicy policy;
    for (const auto& d :
         find_all(client_, database_, session,
                  commands::find_subscribed(std::vector<std::string>{token.handler}),
                  "find subscription"))
      policy = reported([&] { return read_subscription(d.get()); }).retry;
    auto l = lanes.find({token.handler, token.lane});
    auto d = deliveries.find({token.handler, token.event_id});
    const WorkDelivery* delivery = d == deliveries.end() ? nullptr : &d->second;
    const core::FenceView fence =
        fence_of(token, l == lanes.end() ? nullptr : &l->second, delivery);
    const core::AttemptEnd end = core::end_attempt(
        ending, token, fence, policy, delivery ? delivery->attempts : 0, retry_after.has_value());
    if (end.result == core::AttemptResult::kLost) return;
    const std::int64_t now = now_ms();
    std::optional<std::int64_t> due;
    if (end.result == core::AttemptResult::kRetry)
      due = now + (retry_after ? retry_after->count() : end.delay_us / 1000);
    run(client_, database_, session,
        commands::end_update(token.handler, token.event_id, delivery->claims, end, due,
                             ending == core::Ending::kRelease ? std::string() : error, now),
        "end attempt");
    run(client_, database_, session,
        commands::pull_in_flight(token.handler, token.lane, token.event_id), "leave lane");
    result = end.result;
  });
  return result;
}

store::FailOutcome MongoStore::fail(const std::string& token, const std::string& error,
                                    std::optional<std::chrono::milliseconds> retry_after) {
  if (retry_after)
    retry_after = std::chrono::milliseconds(core::checked_delay_ms(
        retry_after->count(), core::kDefaultMaxDelayUs, "retry_after", "the store's maximum delay"));
  switch (end(token, core::Ending::kFail, error, retry_after)) {
    case core::AttemptResult::kRetry:
      return store::FailOutcome::kRetry;
    case core::AttemptResult::kDead:
      return store::FailOutcome::kDead;
    default:
      return store::FailOutcome::kLost;
  }
}

bool MongoStore::bury(const std::string& token, const std::string& error) {
  return end(token, core::Ending::kBury, error, std::nullopt) != core::AttemptResult::kLost;
}

bool MongoStore::release(const std::string& token) {
  return end(token, core::Ending::kRelease, "", std::nullopt) != core::AttemptResult::kLost;
}

int MongoStore::relinquish(const store::Worker& worker) {
  reported([&] { core::validate_worker(worker.name); });
  const std::string& holder = holder_of(worker);
  std::vector<StoredLane> covered;
  for (auto& l : lanes_of(find_all(client_, database_, nullptr,
                                   commands::find_owned_lanes(worker.name), "find lanes"))) {
    if (core::relinquish_covers(l.holder.has_value(), l.holder == holder, true))
      covered.push_back(std::move(l));
  }
  HandlerEvents refs;
  for (const auto& l : covered)
    for (const auto& id : l.in_flight) refs.push_back({l.handler, id});
  const auto pending =
      refs.empty()
          ? decltype(deliveries_of({})){}
          : deliveries_of(find_all(client_, database_, nullptr,
                                   commands::find_deliveries(refs, true), "find in flight"));
  std::vector<StoredLane> going;
  for (auto& l : covered) {
    std::size_t live = 0;
    for (const auto& id : l.in_flight) {
      auto d = pending.find({l.handler, id});
      if (core::counts_in_flight(d != pending.end() && d->second.pending())) ++live;
    }
    if (core::relinquishes(live)) going.push_back(std::move(l));
  }
  if (going.empty()) return 0;
  Bson reply = run(client_, database_, nullptr, commands::hand_back(going), "hand back lanes");
  return static_cast<int>(count_of(reply, "n"));
}

int MongoStore::extend_lease(const store::Worker& worker, std::chrono::milliseconds lease) {
  reported([&] {
    core::validate_worker(worker.name);
    core::validate_lease(std::chrono::duration_cast<std::chrono::microseconds>(lease).count());
  });
  const std::string& holder = holder_of(worker);
  const std::int64_t now = now_ms();
  std::vector<StoredLane> callers;
  for (auto& l : lanes_of(find_all(client_, database_, nullptr,
                                   commands::find_owned_lanes(worker.name), "find lanes"))) {
    if (core::is_callers(binding_of(l, holder, now), true)) callers.push_back(std::move(l));
  }
  if (callers.empty()) return 0;
  Bson reply = run(client_, database_, nullptr,
                   commands::renew(callers, worker.name, holder, now + lease.count()), "renew");
  return static_cast<int>(count_of(reply, "n"));
}

// No change streams yet: polling is the correctness path anyway (store.hpp), so a
// wake-up never arrives and wait_for_wakeup sleeps the timeout out.
void MongoStore::listen() {}

bool MongoStore::wait_for_wakeup(std::chrono::milliseconds timeout) {
  if (timeout.count() > 0) std::this_thread::sleep_for(timeout);
  return false;
}

std::unique_ptr<store::Transaction> MongoStore::begin() {
  return std::make_unique<MongoTransaction>(client_, database_, options_.completion_history);
}

}  // namespace relaybus::mongo

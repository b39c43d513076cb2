// The operator half and maintenance: statistics and listing tell processing from pending
// and dead as a claim sees them; unsubscribe stops new deliveries and keeps old ones until
// a re-subscribe; requeue_dead; the maintenance takeover charges what a crashed worker had
// in flight even when nobody claims its lanes again; purge removes only what expired.
#include "contract/contract.hpp"

namespace relaybus::contract {
namespace {

std::vector<std::string> listed_ids(const std::vector<store::ListedDelivery>& rows) {
  std::vector<std::string> out;
  for (const auto& r : rows) out.push_back(r.event_id);
  return out;
}

TEST_P(Contract, StatisticsTellPendingProcessingAndDeadApart) {
  auto s = open();
  const std::string type = unique_name("type");
  const std::string h = subscribe(*s, "h", {type});
  const auto none = statistics_of(*s, h);
  ASSERT_TRUE(none.has_value()) << "a subscribed handler without deliveries is listed";
  EXPECT_EQ(none->pending + none->processing + none->dead, 0);
  EXPECT_FALSE(none->oldest_pending_us.has_value());

  // Three unkeyed events in three different lanes, so a claim of one leaves the others.
  const std::string first = id_outside_lanes("e", {});
  const std::string second = id_outside_lanes("e", {core::lane_of(first)});
  const std::string third = id_outside_lanes("e", {core::lane_of(first), core::lane_of(second)});
  for (const auto& id : {first, second, third}) s->publish(event(type, id));
  const Worker w = worker("w");
  const auto running = claim(*s, w, {h}, 1);
  ASSERT_EQ(running.size(), 1u);
  const auto buried = claim(*s, w, {h}, 1);
  ASSERT_EQ(buried.size(), 1u);
  ASSERT_TRUE(s->bury(buried[0].token, "poison"));

  const auto stats = statistics_of(*s, h);
  ASSERT_TRUE(stats.has_value());
  EXPECT_EQ(stats->processing, 1) << "the claimed, unfinished delivery";
  EXPECT_EQ(stats->pending, 1);
  EXPECT_EQ(stats->dead, 1);
  EXPECT_EQ(stats->completed, 0) << "no completion history by default";
  EXPECT_TRUE(stats->oldest_pending_us.has_value());

  ASSERT_EQ(s->complete_many({running[0].token}), 1);
  const auto after = statistics_of(*s, h);
  EXPECT_EQ(after->processing, 0);
  EXPECT_EQ(after->pending, 1);
}

TEST_P(Contract, ListingShowsStatusesAndLeaseOwnersNewestFirst) {
  auto s = open();
  const std::string type = unique_name("type");
  const std::string h = subscribe(*s, "h", {type});
  const std::string older = id_outside_lanes("e", {});
  s->publish(event(type, older, unique_name("k")));
  std::this_thread::sleep_for(5ms);  // distinct creation times
  const std::string newer = id_outside_lanes("e", {core::lane_of(older)});
  s->publish(event(type, newer));
  const Worker w = worker("w");
  ASSERT_EQ(ids(claim(*s, w, {h}, 10)), sorted({older, newer}));
  const auto again = claim(*s, worker("x"), {h});
  EXPECT_TRUE(again.empty());

  store::DeliveryFilter all;
  all.handler = h;
  auto rows = s->list_deliveries(all);
  ASSERT_EQ(listed_ids(rows), (std::vector<std::string>{newer, older})) << "newest first";
  for (const auto& r : rows) {
    EXPECT_EQ(r.handler, h);
    EXPECT_EQ(r.type, type);
    EXPECT_EQ(r.status, "processing");
    EXPECT_EQ(r.lease_owner, std::optional<std::string>(w.name));
    EXPECT_GT(r.created_at_us, 0);
  }
  EXPECT_TRUE(rows[1].key.has_value());
  EXPECT_FALSE(rows[0].key.has_value());

  store::DeliveryFilter dead = all;
  dead.status = "dead";
  EXPECT_TRUE(s->list_deliveries(dead).empty());
  store::DeliveryFilter one = all;
  one.max_rows = 1;
  EXPECT_EQ(listed_ids(s->list_deliveries(one)), std::vector<std::string>{newer});
  store::DeliveryFilter other;
  other.handler = unique_name("nobody");
  EXPECT_TRUE(s->list_deliveries(other).empty());
}

TEST_P(Contract, ListingRejectsAnUnknownStatusOrANegativeLimit) {
  auto s = open();
  store::DeliveryFilter bad;
  bad.status = "running";
  EXPECT_STORE_ERROR(s->list_deliveries(bad), core::ErrorCode::kInvalidParameter);
  store::DeliveryFilter negative;
  negative.max_rows = -1;
  EXPECT_STORE_ERROR(s->list_deliveries(negative), core::ErrorCode::kInvalidParameter);
}

TEST_P(Contract, UnsubscribeStopsNewDeliveriesAndAReSubscribeResumesTheOldOnes) {
  auto s = open();
  const std::string type = unique_name("type");
  const std::string h = subscribe(*s, "h", {type});
  const std::string kept = s->publish(event(type, unique_name("kept")));
  s->unsubscribe(h);
  EXPECT_STORE_ERROR(s->unsubscribe(h), core::ErrorCode::kUndefinedObject);
  const std::string later = s->publish(event(type, unique_name("later")));
  EXPECT_EQ(s->lookup(later, h), std::nullopt) << "an unsubscribed handler got a new delivery";
  EXPECT_EQ(s->lookup(kept, h), (store::DeliveryState{"pending", 0})) << "its old one is kept";
  const Worker w = worker("w");
  EXPECT_STORE_ERROR(claim(*s, w, {h}), core::ErrorCode::kUndefinedObject);

  s->subscribe({h, {type}, {}});
  EXPECT_EQ(ids(claim(*s, w, {h})), std::vector<std::string>{kept});
}

TEST_P(Contract, RequeueDeadRequeuesEveryDeadLetterOfTheHandler) {
  auto s = open();
  const std::string type = unique_name("type");
  const std::string h = subscribe(*s, "h", {type});
  const std::string other = subscribe(*s, "other", {type});
  const std::string a = s->publish(event(type, unique_name("a")));
  const std::string b = s->publish(event(type, unique_name("b")));
  const Worker w = worker("w");
  for (const auto& d : claim(*s, w, {h, other})) ASSERT_TRUE(s->bury(d.token, "poison"));
  EXPECT_EQ(s->requeue_dead(h), 2);
  EXPECT_EQ(s->lookup(a, h), (store::DeliveryState{"pending", 0}));
  EXPECT_EQ(s->lookup(b, h), (store::DeliveryState{"pending", 0}));
  EXPECT_EQ(s->lookup(a, other), (store::DeliveryState{"dead", 1})) << "another handler's";
  EXPECT_EQ(s->requeue_dead(h), 0) << "nothing dead is left";
  EXPECT_EQ(ids(claim(*s, w, {h})), sorted({a, b}));
  EXPECT_STORE_ERROR(s->requeue_dead(unique_name("nobody")), core::ErrorCode::kUndefinedObject);
}

// A worker crashes holding deliveries and nobody claims that handler again: the
// maintenance takeover charges each the lost attempt (dead-lettering one out of budget),
// fences the crashed worker's tokens, and leaves a live lease alone.
TEST_P(Contract, TakeOverExpiredChargesWhatACrashedWorkerHadInFlight) {
  auto s = open();
  const std::string type = unique_name("type");
  core::RetryPolicy one_attempt;
  one_attempt.max_attempts = 1;
  const std::string h = subscribe(*s, "h", {type});
  const std::string fragile = subscribe(*s, "fragile", {type}, one_attempt);
  const std::string id = s->publish(event(type, unique_name("e")));
  const Worker crashed = worker("crashed"), alive = worker("alive");
  const auto lost = claim(*s, crashed, {h, fragile}, 10, kShortLease);
  ASSERT_EQ(lost.size(), 2u);
  const std::string live_type = unique_name("live");
  const std::string live_handler = subscribe(*s, "live", {live_type});
  s->publish(event(live_type, unique_name("live-e")));
  const auto live = claim(*s, alive, {live_handler}, 10, kLongLease);
  ASSERT_EQ(live.size(), 1u);

  sleep_past_lease(kShortLease);
  EXPECT_GE(s->take_over_expired(), 1);
  EXPECT_EQ(s->lookup(id, h), (store::DeliveryState{"pending", 1})) << "charged once";
  EXPECT_EQ(s->lookup(id, fragile), (store::DeliveryState{"dead", 1})) << "out of budget";
  EXPECT_EQ(s->complete_many({lost[0].token, lost[1].token}), 0) << "the tokens are fenced";
  s->take_over_expired();
  EXPECT_EQ(s->lookup(id, h), (store::DeliveryState{"pending", 1})) << "charged only once";
  EXPECT_EQ(s->complete_many({live[0].token}), 1) << "a live lease was taken over";
  EXPECT_EQ(ids(claim(*s, worker("next"), {h})), std::vector<std::string>{id});
}

// Purge: with zero retention, dead letters and events without deliveries go; pending
// deliveries of subscribed handlers and their events never do.
TEST_P(Contract, PurgeRemovesOnlyWhatExpired) {
  auto s = open();
  const std::string type = unique_name("type");
  const std::string h = subscribe(*s, "h", {type});
  const std::string dead = s->publish(event(type, id_outside_lanes("dead", {})));
  const std::string waiting =
      s->publish(event(type, id_outside_lanes("wait", {core::lane_of(dead)})));
  const Worker w = worker("w");
  const auto claimed = claim(*s, w, {h}, 1);
  ASSERT_EQ(claimed.size(), 1u);
  ASSERT_TRUE(s->bury(claimed[0].token, "poison"));
  const std::string buried = claimed[0].event_id;
  const std::string left = buried == dead ? waiting : dead;

  // Default retention (days): nothing of this test has expired.
  s->purge_expired();
  EXPECT_EQ(s->lookup(buried, h), (store::DeliveryState{"dead", 1}));

  auto expiring = backend().open_expiring();
  std::this_thread::sleep_for(5ms);  // strictly older than "now minus zero"
  std::int64_t purged = 0;
  for (std::int64_t n; (n = expiring->purge_expired()) > 0;) purged += n;
  EXPECT_GE(purged, 1);
  EXPECT_EQ(s->lookup(buried, h), std::nullopt) << "the dead letter was not purged";
  EXPECT_EQ(s->lookup(left, h), (store::DeliveryState{"pending", 0})) << "a pending one went";
  EXPECT_EQ(ids(claim(*s, w, {h})), std::vector<std::string>{left})
      << "the event of a pending delivery was purged";
  // A publish of the purged event's id again is a new event.
  s->publish(event(type, buried));
  EXPECT_EQ(s->lookup(buried, h), (store::DeliveryState{"pending", 0}));
}

// A delivery's id comes back after its event is purged: a publish of the id is a new event.
// The worker that completed the old delivery may still hold its lane, whose in-flight list
// still names the id (a completion deletes the delivery and leaves the list to the next
// claim). The new delivery is not that attempt: it must be handed out, not taken for one
// still running. (PostgreSQL before the fix: every later claim of the worker returned
// nothing and kept the lane, with the new delivery counted as processing.)
TEST_P(Contract, RepublishAfterPurgeIsDeliveredToTheWorkerThatRanTheOld) {
  auto s = open();
  const std::string type = unique_name("type");
  const std::string h = subscribe(*s, "h", {type});
  const std::string id = s->publish(event(type, unique_name("again")));
  const Worker w = worker("w");
  const auto first = claim(*s, w, {h});
  ASSERT_EQ(ids(first), std::vector<std::string>{id});
  ASSERT_EQ(s->complete_many({first[0].token}), 1);

  auto expiring = backend().open_expiring();
  std::this_thread::sleep_for(5ms);  // strictly older than "now minus zero"
  while (expiring->purge_expired() > 0) {
  }
  s->publish(event(type, id));
  ASSERT_EQ(s->lookup(id, h), (store::DeliveryState{"pending", 0})) << "not a new event";
  const auto second = claim(*s, w, {h});
  ASSERT_EQ(ids(second), std::vector<std::string>{id})
      << "the new delivery was taken for the completed attempt still in flight";
  EXPECT_EQ(s->complete_many({second[0].token}), 1);
  EXPECT_EQ(s->lookup(id, h), std::nullopt);
}

}  // namespace
}  // namespace relaybus::contract

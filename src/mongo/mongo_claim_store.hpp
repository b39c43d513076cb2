// Internal to src/mongo (not installed): MongoClaimStore, the core::ClaimStore that
// MongoStore::claim runs core::run_claim on.
#pragma once

#include <mongoc/mongoc.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/claim_protocol.hpp"
#include "documents.hpp"
#include "driver.hpp"
#include "lanes.hpp"

namespace relaybus::mongo::detail {

// core::ClaimStore on MongoDB, for one claim, or for one maintenance takeover
// (expired_lanes, then core::take_over_expired_lanes). Nothing is locked
// (LaneConcurrency::kConditionalWrites): each call is its own command(s), outside any
// transaction, and every lane write is conditional on the epoch (and version) it read. The
// clock is the client's, read once per instance (as publish stamps availableAt).
class MongoClaimStore final : public core::ClaimStore {
 public:
  MongoClaimStore(mongoc_client_t* client, const std::string& database, const std::string& worker,
                  const std::string& holder, std::int64_t lease_ms)
      : client_(client),
        database_(database),
        worker_(worker),
        holder_(holder),
        lease_ms_(lease_ms),
        now_(now_ms()) {}

  core::LaneConcurrency concurrency() const override;

  std::vector<core::SubscribedHandler> subscribed_handlers(
      const std::optional<std::vector<std::string>>& requested) override;

  std::vector<core::HeldLane> held_lanes(const std::vector<std::string>& handlers) override;

  // Re-reads the lanes; one whose epoch moved since held_lanes read it changed hands
  // meanwhile and is left out. A completion in an open transaction is not visible here:
  // it and the takeover's charge write the same delivery document, so one of them fails.
  std::vector<core::LaneSnapshot> lock_for_takeover(
      const std::vector<core::LaneRef>& lanes) override;

  std::vector<core::LostDelivery> lock_lost(
      const std::vector<core::DeliveryRef>& deliveries) override;

  void write_charges(const std::vector<core::Charge>& charges) override;

  std::vector<core::LaneRef> lanes_with_work(const std::vector<std::string>& handlers) override;

  std::vector<core::AcquiredLane> lock_acquirable(const std::vector<core::LaneRef>& window,
                                                  int wanted) override;

  // Per lane, pages of its due deliveries in due order; a keyed one is left out when
  // core::has_pending_predecessor says so over the first pending sequence of its key (any
  // lower pending sequence exists exactly when the lowest one is lower). Left out before
  // the lane's room is counted, as the other stores do.
  std::vector<core::CandidateRow> candidates(const std::vector<core::CandidateLane>& lanes,
                                             int limit) override;

  std::vector<bool> write_lanes(const std::vector<core::LaneUpdate>& updates) override;

  void clear_lost(const std::vector<core::LaneRef>& lanes,
                  const std::vector<std::int64_t>& epochs) override;

  // The maintenance takeover's read, outside a claim: up to `limit` lanes
  // core::due_for_takeover chooses (the server filter is its copy), as snapshots whose
  // in_flight holds only the ids core::counts_in_flight keeps. Their versions are recorded,
  // so write_lanes is conditional on this read, and their handlers' retry policies read,
  // for the charges (core's defaults for a handler no longer subscribed, as in PostgreSQL).
  std::vector<core::LaneSnapshot> expired_lanes(int limit);

 private:
  // The page of candidates grows from the lane's room up to this, while deliveries with a
  // pending predecessor fill the pages.
  static constexpr int kMaxCandidatePage = 1024;

  std::vector<Bson> all(const Bson& cmd, const char* what);

  static LaneIds ids(const std::vector<core::LaneRef>& lanes);

  static core::LaneSnapshot snapshot(const StoredLane& l);

  bool acquirable(const StoredLane& l) const;

  std::map<std::string, std::int64_t> first_sequences(const core::LaneSnapshot& lane,
                                                      const std::vector<WorkDelivery>& found);

  core::RetryPolicy policy_of(const std::string& handler) const;

  mongoc_client_t* client_;
  const std::string& database_;
  const std::string& worker_;
  const std::string& holder_;
  std::int64_t lease_ms_;
  std::int64_t now_;
  std::map<std::string, core::RetryPolicy> policies_;
  std::map<std::pair<std::string, std::int16_t>, std::int64_t> held_epochs_;
  // The version of each lane as last read or written by this claim.
  std::map<std::pair<std::string, std::int16_t>, std::optional<std::int64_t>> versions_;
  std::map<std::pair<std::string, std::string>, std::int32_t> claims_read_;
};

}  // namespace relaybus::mongo::detail

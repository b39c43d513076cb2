// Internal to src/mongo (not installed): completing lease tokens, and the fence a token is
// checked against, shared by MongoStore's worker half and MongoTransaction.
#pragma once

#include <mongoc/mongoc.h>

#include <string>
#include <vector>

#include "core/attempt_end.hpp"
#include "core/lease_token.hpp"
#include "documents.hpp"

namespace relaybus::mongo::detail {

std::vector<core::LeaseToken> parse_tokens(const std::vector<std::string>& tokens);
core::FenceView fence_of(const core::LeaseToken& token, const StoredLane* lane,
                         const WorkDelivery* delivery);
// Completes `tokens` in `session`'s transaction: reads their lanes and deliveries in its
// snapshot, deletes those core::token_holds, and with `history` records them in completions
// in the same transaction (PostgreSQL inserts its history row in the completing statement).
// A takeover charges (writes) the same delivery documents, so of a completion and a charge
// only one commits: the other conflicts.
int complete_in(mongoc_client_t* client, const std::string& database,
                mongoc_client_session_t* session, const std::vector<core::LeaseToken>& tokens,
                bool history);

}  // namespace relaybus::mongo::detail

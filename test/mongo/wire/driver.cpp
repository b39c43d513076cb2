// Drives relaybus::mongo::MongoStore for the wire tests: `driver URI DATABASE [OPTIONS]`
// (OPTIONS: comma-separated history, retention_dead=SECONDS, retention_completed=SECONDS,
// the MongoOptions) reads one operation per line from stdin (fields separated by tabs, "-" for an
// absent value), runs it against the server the test scripts, and prints one line per operation:
// "ok <result>" or "error <code> <native code> <message>".
//
//   setup
//   subscribe        HANDLER  TYPE[,TYPE...]
//   publish          TYPE  KEY  PAYLOAD  [EVENT_ID  [HANDLER,...  [DELAY_MS]]]
//   batch            N  TYPE  KEY            (N events, payload {"n": i})
//   session_publish  TYPE  KEY  PAYLOAD      (in a transaction the driver starts and commits)
//   session_without_transaction  TYPE  KEY  PAYLOAD   (in a session with no transaction)
//   requeue          EVENT_ID  HANDLER
//   lookup           EVENT_ID  HANDLER
//   claim            WORKER  HOLDER  BATCH  [HANDLER,...]   prints "<n> <token>,<token>..."
//   complete         TOKEN[,TOKEN...]                       prints how many were completed
//   fail             TOKEN  ERROR                           prints retry, dead or lost
//   tx_complete      TOKEN                                  begin(), complete, commit
//   relinquish       WORKER  HOLDER                         prints how many lanes went back
//   extend           WORKER  HOLDER                         prints how many were renewed
//   unsubscribe      HANDLER
//   requeue_dead     HANDLER|-                              prints how many
//   statistics       prints "handler:pending/processing/dead/completed/oldest_us|-" per
//                    handler, separated by spaces
//   list             STATUS|-  HANDLER|-  MAX_ROWS          prints one
//                    "event/handler/type/key|-/status/attempts/owner|-" per row, by spaces
//   take_over        prints how many lanes were taken over
//   purge            prints how many documents were deleted
//   lane             KEY_OR_EVENT_ID                        core::lane_of (no server)
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/lane.hpp"
#include "mongo/mongo_store.hpp"

namespace {

using relaybus::store::Event;
using relaybus::store::StoreError;

// Keeps empty fields, trailing ones too ("a,,b," is four).
std::vector<std::string> split(const std::string& line, char by) {
  std::vector<std::string> out(1);
  for (char c : line) {
    if (c == by) {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

std::optional<std::string> optional_field(const std::vector<std::string>& f, std::size_t i) {
  if (i >= f.size() || f[i] == "-") return std::nullopt;
  return f[i];
}

Event event_of(const std::vector<std::string>& f) {
  Event e;
  e.type = f.at(1);
  e.key = optional_field(f, 2);
  e.payload = f.at(3);
  e.event_id = optional_field(f, 4);
  if (auto handlers = optional_field(f, 5)) e.handlers = split(*handlers, ',');
  if (auto delay = optional_field(f, 6)) e.delay = std::chrono::milliseconds(std::stoll(*delay));
  return e;
}

std::string join(const std::vector<std::string>& ids) {
  std::string out;
  for (const auto& id : ids) out += (out.empty() ? "" : ",") + id;
  return out;
}

std::string run(relaybus::mongo::MongoStore& store, const std::vector<std::string>& f) {
  const std::string& op = f.at(0);
  if (op == "setup") {
    store.setup();
    return "setup";
  }
  if (op == "subscribe") {
    store.subscribe({f.at(1), split(f.at(2), ','), {}});
    return "subscribed";
  }
  if (op == "publish") return store.publish(event_of(f));
  if (op == "batch") {
    std::vector<Event> events;
    for (int i = 0; i < std::stoi(f.at(1)); ++i) {
      Event e;
      e.type = f.at(2);
      e.key = optional_field(f, 3);
      e.payload = "{\"n\": " + std::to_string(i) + "}";
      events.push_back(e);
    }
    return join(store.publish_batch(events));
  }
  if (op == "session_publish") {
    bson_error_t error;
    mongoc_client_session_t* session = mongoc_client_start_session(store.client(), nullptr, &error);
    if (!session) return std::string("no session: ") + error.message;
    if (!mongoc_client_session_start_transaction(session, nullptr, &error))
      return std::string("no transaction: ") + error.message;
    std::string id;
    try {
      id = store.publish(session, event_of(f));
    } catch (...) {
      mongoc_client_session_abort_transaction(session, nullptr);
      mongoc_client_session_destroy(session);
      throw;
    }
    bson_t reply;
    const bool ok = mongoc_client_session_commit_transaction(session, &reply, &error);
    bson_destroy(&reply);
    mongoc_client_session_destroy(session);
    return ok ? id : std::string("commit failed: ") + error.message;
  }
  if (op == "session_without_transaction") {
    bson_error_t error;
    mongoc_client_session_t* session = mongoc_client_start_session(store.client(), nullptr, &error);
    if (!session) return std::string("no session: ") + error.message;
    try {
      store.publish(session, event_of(f));
    } catch (...) {
      mongoc_client_session_destroy(session);
      throw;
    }
    mongoc_client_session_destroy(session);
    return "published outside a transaction";
  }
  if (op == "requeue") return store.requeue(f.at(1), f.at(2)) ? "requeued" : "not-requeued";
  if (op == "lookup") {
    auto state = store.lookup(f.at(1), f.at(2));
    return state ? state->status + " " + std::to_string(state->attempts) : "none";
  }
  if (op == "claim") {
    std::vector<std::string> handlers;
    if (auto h = optional_field(f, 4)) handlers = split(*h, ',');
    const auto got = store.claim({f.at(1), f.at(2) == "-" ? "" : f.at(2)}, std::stoi(f.at(3)),
                                 std::chrono::seconds(30), handlers);
    std::vector<std::string> tokens;
    for (const auto& d : got) tokens.push_back(d.token);
    return std::to_string(got.size()) + " " + join(tokens);
  }
  if (op == "complete") return std::to_string(store.complete_many(split(f.at(1), ',')));
  if (op == "fail") {
    switch (store.fail(f.at(1), f.at(2))) {
      case relaybus::store::FailOutcome::kRetry:
        return "retry";
      case relaybus::store::FailOutcome::kDead:
        return "dead";
      default:
        return "lost";
    }
  }
  if (op == "relinquish")
    return std::to_string(store.relinquish({f.at(1), f.at(2) == "-" ? "" : f.at(2)}));
  if (op == "extend")
    return std::to_string(
        store.extend_lease({f.at(1), f.at(2) == "-" ? "" : f.at(2)}, std::chrono::seconds(30)));
  if (op == "unsubscribe") {
    store.unsubscribe(f.at(1));
    return "unsubscribed";
  }
  if (op == "requeue_dead") return std::to_string(store.requeue_dead(optional_field(f, 1)));
  if (op == "statistics") {
    std::ostringstream out;
    for (const auto& s : store.statistics()) {
      out << (out.tellp() > 0 ? " " : "") << s.handler << ":" << s.pending << "/" << s.processing
          << "/" << s.dead << "/" << s.completed << "/";
      if (s.oldest_pending_us) {
        out << *s.oldest_pending_us;
      } else {
        out << "-";
      }
    }
    return out.str();
  }
  if (op == "list") {
    relaybus::store::DeliveryFilter filter;
    filter.status = optional_field(f, 1);
    filter.handler = optional_field(f, 2);
    filter.max_rows = std::stoi(f.at(3));
    std::vector<std::string> rows;
    for (const auto& d : store.list_deliveries(filter))
      rows.push_back(d.event_id + "/" + d.handler + "/" + d.type + "/" + d.key.value_or("-") + "/" +
                     d.status + "/" + std::to_string(d.attempts) + "/" +
                     d.lease_owner.value_or("-"));
    std::string out;
    for (const auto& r : rows) out += (out.empty() ? "" : " ") + r;
    return out;
  }
  if (op == "take_over") return std::to_string(store.take_over_expired());
  if (op == "purge") return std::to_string(store.purge_expired());
  if (op == "lane") return std::to_string(relaybus::core::lane_of(f.at(1)));
  if (op == "tx_complete") {
    auto tx = store.begin();
    const bool done = tx->complete(f.at(1));
    tx->commit();
    return done ? "completed" : "lost";
  }
  return "unknown operation " + op;
}

}  // namespace

// The MongoOptions of argv[3].
relaybus::mongo::MongoOptions options_of(const std::string& text) {
  relaybus::mongo::MongoOptions options;
  for (const auto& option : split(text, ',')) {
    const auto eq = option.find('=');
    const std::string name = option.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : option.substr(eq + 1);
    if (name == "history") options.completion_history = true;
    if (name == "retention_dead") options.retention_dead = std::chrono::seconds(std::stoll(value));
    if (name == "retention_completed")
      options.retention_completed = std::chrono::seconds(std::stoll(value));
  }
  return options;
}

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::cerr << "usage: driver URI DATABASE [OPTIONS] < operations\n";
    return 2;
  }
  try {
    relaybus::mongo::MongoStore store(
        argv[1], argv[2], argc == 4 ? options_of(argv[3]) : relaybus::mongo::MongoOptions{});
    std::string line;
    while (std::getline(std::cin, line)) {
      if (line.empty()) continue;
      try {
        const std::string result = run(store, split(line, '\t'));
        std::cout << "ok " << result << std::endl;
      } catch (const StoreError& e) {
        std::cout << "error " << relaybus::core::name_of(e.code()) << " "
                  << (e.native_code().empty() ? "-" : e.native_code()) << " " << e.what()
                  << std::endl;
      }
    }
  } catch (const StoreError& e) {
    std::cout << "error " << relaybus::core::name_of(e.code()) << " - " << e.what() << std::endl;
  }
  return 0;
}

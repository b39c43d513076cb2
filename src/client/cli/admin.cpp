// The operator commands, on any store (--db: a libpq connection string or URI, a mongodb://
// URI, or nothing for libpq's PG* environment): relaybus setup, subscribe, unsubscribe,
// stats, dead list, dead requeue, maintain.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <limits>
#include <sstream>
#include <thread>

#include "client/tool/store_uri.hpp"
#include "commands.hpp"
#include "guided_error.hpp"
#include "listings.hpp"
#include "operator_store.hpp"
#include "pg_readiness.hpp"
#include "shell_word.hpp"

namespace relaybus::cli {

namespace {

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// The one handler a command acts on: HANDLER, as show and cancel take theirs, or --handler
// (the older spelling, still taken); one of them, not both.
std::string one_handler(const tool::Parsed& args, const char* command) {
  const auto option = args.optional<std::string>("handler");
  const auto& words = args.arguments();
  if (option && !words.empty())
    throw tool::UsageError(std::string(command) +
                           " takes the handler once: HANDLER or --handler, " + "not both");
  if (option) return *option;
  if (words.empty()) throw tool::UsageError(std::string(command) + " needs the HANDLER to act on");
  return words[0];
}

std::string db_of(const tool::Parsed& args) {
  return args.get<std::string>("db");
}

Format format_of(const tool::Parsed& args) {
  return args.get<bool>("json") ? Format::kJson : Format::kHuman;
}

// An option in milliseconds as the store's microseconds. Only the conversion is checked
// here; the store checks the bounds of the policy (core::validate).
std::int64_t microseconds(const tool::Parsed& args, const std::string& option) {
  const auto ms = args.get<std::int64_t>(option);
  if (ms > std::numeric_limits<std::int64_t>::max() / 1000)
    throw tool::UsageError("--" + option + " is out of range");
  return ms * 1000;
}

volatile std::sig_atomic_t g_stop = 0;

}  // namespace

int setup_command(const tool::Parsed& args) {
  const std::string db = db_of(args);
  if (tool::is_mongodb_uri(db)) {
    std::printf("%s\n", tool::setup_mongodb_store(db).c_str());
    return 0;
  }
  const PgReadiness ready = check_pg_ready(db, "relaybus setup", false);
  std::printf(
      "PostgreSQL: relaybus %s is installed in database \"%s\"; nothing to set up here "
      "(CREATE EXTENSION relaybus and ALTER EXTENSION relaybus UPDATE do it)\n",
      ready.version.c_str(), ready.database.c_str());
  if (ready.version != RELAYBUS_VERSION)
    std::printf("this tool is relaybus %s: ALTER EXTENSION relaybus UPDATE updates the database\n",
                RELAYBUS_VERSION);
  return 0;
}

int subscribe_command(const tool::Parsed& args) {
  store::Subscription s;
  s.handler = args.get<std::string>("handler");
  s.event_types = split(args.get<std::string>("types"));
  if (s.event_types.empty())
    throw tool::UsageError("--types needs at least one event type (T1,T2,...; * for every type)");
  s.retry.max_attempts = args.get<int>("max-attempts");
  s.retry.backoff_base_us = microseconds(args, "backoff-base-ms");
  s.retry.backoff_max_us = microseconds(args, "backoff-max-ms");
  auto db = open_operator_store(db_of(args), "relaybus subscribe");
  db->subscribe(s);
  std::printf("subscribed %s\n", s.handler.c_str());
  return 0;
}

int unsubscribe_command(const tool::Parsed& args) {
  const std::string handler = one_handler(args, "unsubscribe");
  auto db = open_operator_store(db_of(args), "relaybus unsubscribe");
  db->unsubscribe(handler);
  std::printf("unsubscribed %s\n", handler.c_str());
  return 0;
}

int pause_command(const tool::Parsed& args) {
  const auto handler = one_handler(args, "pause");
  auto db = open_operator_store(db_of(args), "relaybus pause");
  std::printf(db->pause(handler) ? "paused %s\n" : "%s was paused already\n", handler.c_str());
  return 0;
}

int resume_command(const tool::Parsed& args) {
  const auto handler = one_handler(args, "resume");
  auto db = open_operator_store(db_of(args), "relaybus resume");
  std::printf(db->resume(handler) ? "resumed %s\n" : "%s was not paused\n", handler.c_str());
  return 0;
}

int cancel_command(const tool::Parsed& args) {
  const auto& words = args.arguments();
  if (words.size() != 2) throw tool::UsageError("cancel takes EVENT_ID and HANDLER");
  const std::string& event_id = words[0];
  const std::string& handler = words[1];
  auto db = open_operator_store(db_of(args), "relaybus cancel");
  if (!db->cancel(event_id, handler))
    throw GuidedError("event \"" + event_id + "\" has no delivery to handler \"" + handler +
                          "\": nothing cancelled",
                      "relaybus dead list --handler=" + shell_word(handler) +
                          " lists its dead letters; a completed delivery has none left");
  std::printf("cancelled %s for %s\n", event_id.c_str(), handler.c_str());
  return 0;
}

int stats_command(const tool::Parsed& args) {
  auto db = open_operator_store(db_of(args), "relaybus stats");
  const auto stats = db->statistics();
  print_statistics(stats, unrouted_types(*db, db_of(args)), format_of(args));
  return 0;
}

int dead_list_command(const tool::Parsed& args) {
  store::DeliveryFilter filter;
  filter.status = "dead";
  filter.handler = args.optional<std::string>("handler");
  filter.max_rows = args.get<int>("limit");
  // The store checks the filter (store::validate) before it sends anything.
  auto db = open_operator_store(db_of(args), "relaybus dead list");
  print_deliveries(db->list_deliveries(filter), format_of(args));
  return 0;
}

int dead_requeue_command(const tool::Parsed& args) {
  const auto& words = args.arguments();
  if (words.size() == 1)
    throw tool::UsageError("requeueing one delivery takes EVENT_ID and HANDLER; got only '" +
                           words[0] + "'");
  if (words.size() == 2 && args.has("handler"))
    throw tool::UsageError(
        "--handler selects every dead letter of a handler; with EVENT_ID "
        "HANDLER leave it out");
  auto db = open_operator_store(db_of(args), "relaybus dead requeue");
  if (words.size() == 2) {
    const std::string& event_id = words[0];
    const std::string& handler = words[1];
    if (!db->requeue(event_id, handler))
      throw GuidedError("event \"" + event_id + "\" has no dead delivery to handler \"" + handler +
                            "\": nothing requeued",
                        "relaybus dead list --handler=" + shell_word(handler) +
                            " lists that handler's dead letters (a delivery that is pending, "
                            "in flight or completed is not one)");
    print_requeued(1, format_of(args));
    return 0;
  }
  print_requeued(db->requeue_dead(args.optional<std::string>("handler")), format_of(args));
  return 0;
}

int maintain_command(const tool::Parsed& args) {
  // Without --every-s: once. 0 used to mean once too, silently: refused, before connecting.
  const double every = args.optional<double>("every-s").value_or(0);
  if (args.optional<double>("every-s") && !(every > 0))
    throw tool::UsageError("--every-s must be more than 0 seconds; leave it out to run once");
  // What purge_expired deletes: rows on PostgreSQL, documents on MongoDB.
  const char* purged_what = tool::is_mongodb_uri(db_of(args)) ? "documents" : "rows";
  auto db = open_operator_store(db_of(args), "relaybus maintain");
  std::signal(SIGTERM, [](int) { g_stop = 1; });
  std::signal(SIGINT, [](int) { g_stop = 1; });
  do {
    const int lanes = db->take_over_expired();
    long long purged = 0;
    for (std::int64_t n; !g_stop && (n = db->purge_expired()) > 0;) purged += n;
    std::printf("maintain: %d lanes taken over, %lld expired %s purged\n", lanes, purged,
                purged_what);
    std::fflush(stdout);
    for (double waited = 0; every > 0 && waited < every && !g_stop; waited += 0.1)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  } while (every > 0 && !g_stop);
  return 0;
}

}  // namespace relaybus::cli

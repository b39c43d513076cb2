// Operator commands, on any store (--db: a libpq connection string or a mongodb:// URI):
// relaybus setup, subscribe, unsubscribe, stats, dead list, dead requeue, maintain.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <sstream>
#include <thread>

#include "args.hpp"
#include "commands.hpp"
#include "connection.hpp"
#include "store_uri.hpp"

namespace relaybus::cli {

namespace {

std::optional<std::string> utc(const std::optional<std::int64_t>& us) {
  if (!us) return std::nullopt;
  const std::time_t seconds = static_cast<std::time_t>(*us / 1000000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char text[48];
  const std::size_t n = std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &tm);
  std::snprintf(text + n, sizeof text - n, ".%03d+00",
                static_cast<int>((*us % 1000000 + 1000000) % 1000000 / 1000));
  return std::string(text);
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

volatile std::sig_atomic_t g_stop = 0;

}  // namespace

int setup_command(const Args& args) {
  std::printf("%s\n", setup_store(args.required("db")).c_str());
  return 0;
}

int subscribe_command(const Args& args) {
  auto db = open_store(args.required("db"));
  store::Subscription s;
  s.handler = args.required("handler");
  s.event_types = split(args.required("types"));
  s.retry.max_attempts = static_cast<int>(args.integer("max-attempts", s.retry.max_attempts));
  db->subscribe(s);
  std::printf("subscribed %s\n", s.handler.c_str());
  return 0;
}

int unsubscribe_command(const Args& args) {
  auto db = open_store(args.required("db"));
  const std::string handler = args.required("handler");
  db->unsubscribe(handler);
  std::printf("unsubscribed %s\n", handler.c_str());
  return 0;
}

int stats_command(const Args& args) {
  auto db = open_store(args.required("db"));
  Rows rows;
  rows.columns = {"handler", "pending", "processing", "dead", "completed", "oldest_pending"};
  for (const auto& s : db->statistics())
    rows.values.push_back({s.handler, std::to_string(s.pending), std::to_string(s.processing),
                           std::to_string(s.dead), std::to_string(s.completed),
                           utc(s.oldest_pending_us)});
  print_table(rows);
  return 0;
}

int dead_command(const Args& args) {
  const auto& words = args.positional();
  const std::string action = words.size() > 1 ? words[1] : "";
  if (action != "list" && action != "requeue")
    throw UsageError("usage: relaybus dead list|requeue --db CONN [--handler H] [--limit N]");
  auto db = open_store(args.required("db"));
  std::optional<std::string> handler;
  if (args.has("handler")) handler = args.str("handler", "");
  if (action == "requeue") {
    std::printf("requeued %lld\n", static_cast<long long>(db->requeue_dead(handler)));
    return 0;
  }
  store::DeliveryFilter filter;
  filter.status = "dead";
  filter.handler = handler;
  filter.max_rows = static_cast<int>(args.integer("limit", 100));
  Rows rows;
  rows.columns = {"event_id", "handler", "type", "key", "attempts", "created_at", "last_error"};
  for (const auto& d : db->list_deliveries(filter))
    rows.values.push_back({d.event_id, d.handler, d.type, d.key, std::to_string(d.attempts),
                           utc(d.created_at_us), d.last_error});
  print_table(rows);
  return 0;
}

int maintain_command(const Args& args) {
  auto db = open_store(args.required("db"));
  const double every = args.number("every-s", 0);
  std::signal(SIGTERM, [](int) { g_stop = 1; });
  std::signal(SIGINT, [](int) { g_stop = 1; });
  do {
    const int lanes = db->take_over_expired();
    long long purged = 0;
    for (std::int64_t n; !g_stop && (n = db->purge_expired()) > 0;) purged += n;
    std::printf("maintain: %d lanes taken over, %lld documents purged\n", lanes, purged);
    std::fflush(stdout);
    for (double waited = 0; every > 0 && waited < every && !g_stop; waited += 0.1)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  } while (every > 0 && !g_stop);
  return 0;
}

}  // namespace relaybus::cli

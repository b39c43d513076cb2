#include "listings.hpp"

#include <algorithm>
#include <cstdio>

#include "json_output.hpp"
#include "table_output.hpp"
#include "time_text.hpp"

namespace relaybus::cli {

namespace {

std::optional<std::string> json_time_or_null(const std::optional<std::int64_t>& us) {
  if (!us) return std::nullopt;
  return json_time(*us);
}

void print_json(const JsonWriter& json) {
  std::fputs(json.str().c_str(), stdout);
}

}  // namespace

void print_statistics(const std::vector<store::HandlerStatistics>& stats,
                      const std::optional<std::vector<UnroutedType>>& unrouted, Format format) {
  const std::int64_t now = now_us();
  if (format == Format::kJson) {
    JsonWriter json;
    json.begin_object().key("handlers").begin_array();
    for (const auto& s : stats) {
      json.begin_object()
          .key("handler")
          .value(s.handler)
          .key("pending")
          .value(s.pending)
          .key("processing")
          .value(s.processing)
          .key("dead")
          .value(s.dead)
          .key("completed")
          .value(s.completed)
          .key("oldest_pending")
          .value(json_time_or_null(s.oldest_pending_us))
          .key("paused")
          .value(s.paused)
          .key("completed_recorded")
          .value(s.completed_recorded);
      if (s.oldest_pending_us) {
        json.key("oldest_pending_age_s").value((now - *s.oldest_pending_us) / 1000000);
      } else {
        json.key("oldest_pending_age_s").null();
      }
      json.end_object();
    }
    json.end_array();
    if (unrouted) {
      json.key("unrouted").begin_array();
      for (const auto& u : *unrouted)
        json.begin_object().key("type").value(u.type).key("events").value(u.events).end_object();
      json.end_array();
    }
    json.end_object();
    print_json(json);
    return;
  }
  Table table;
  table.columns = {"handler", "pending", "processing", "dead", "completed", "oldest_pending_age",
                   "paused"};
  for (const auto& s : stats) {
    std::optional<std::string> age;
    if (s.oldest_pending_us) age = human_age(now - *s.oldest_pending_us);
    table.rows.push_back({s.handler, std::to_string(s.pending), std::to_string(s.processing),
                          std::to_string(s.dead),
                          s.completed_recorded ? std::to_string(s.completed) : "not recorded", age,
                          s.paused ? "yes" : "no"});
  }
  print_table(table);
  if (std::any_of(stats.begin(), stats.end(),
                  [](const store::HandlerStatistics& s) { return !s.completed_recorded; }))
    std::printf("completed: not recorded while relaybus.completion_history is off (the default)\n");
  if (unrouted && !unrouted->empty()) {
    std::printf("\nevents stored for no handler (no subscription matches their type):\n");
    Table types;
    types.columns = {"type", "events"};
    for (const auto& u : *unrouted) types.rows.push_back({u.type, std::to_string(u.events)});
    print_table(types);
  }
}

void print_deliveries(const std::vector<store::ListedDelivery>& deliveries, Format format) {
  if (format == Format::kJson) {
    JsonWriter json;
    json.begin_object().key("deliveries").begin_array();
    for (const auto& d : deliveries)
      json.begin_object()
          .key("event_id")
          .value(d.event_id)
          .key("handler")
          .value(d.handler)
          .key("type")
          .value(d.type)
          .key("key")
          .value(d.key)
          .key("status")
          .value(d.status)
          .key("attempts")
          .value(d.attempts)
          .key("last_error")
          .value(d.last_error)
          .key("created_at")
          .value(json_time(d.created_at_us))
          .key("available_at")
          .value(json_time_or_null(d.available_at_us))
          .end_object();
    json.end_array().end_object();
    print_json(json);
    return;
  }
  Table table;
  table.columns = {"event_id", "handler", "type", "key", "attempts", "created_at", "last_error"};
  for (const auto& d : deliveries)
    table.rows.push_back({d.event_id, d.handler, d.type, d.key, std::to_string(d.attempts),
                          human_time(d.created_at_us), d.last_error});
  print_table(table);
}

void print_requeued(std::int64_t count, Format format) {
  if (format == Format::kJson) {
    JsonWriter json;
    json.begin_object().key("requeued").value(count).end_object();
    print_json(json);
    return;
  }
  std::printf("requeued %lld\n", static_cast<long long>(count));
}

}  // namespace relaybus::cli

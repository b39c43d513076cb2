// MongoStore's publisher half (mongo_store.hpp).
#include "commands.hpp"
#include "documents.hpp"
#include "driver.hpp"
#include "mongo_store.hpp"

namespace relaybus::mongo {

using namespace detail;

namespace {

struct Checked {
  std::vector<Bson> payloads;
  std::vector<std::string> ids;
};

// Everything is checked (and every id chosen) before any command is sent: all or none.
Checked check_events(const std::vector<store::Event>& events, bool batch) {
  Checked out;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const std::string where = batch ? "events[" + std::to_string(i) + "]: " : "";
    out.payloads.push_back(reported([&] { return commands::validate_event(events[i], where); }));
    out.ids.push_back(events[i].event_id ? *events[i].event_id : new_event_id());
  }
  return out;
}

}  // namespace

void MongoStore::publish_checked(mongoc_client_session_t* session,
                                 const std::vector<store::Event>& events,
                                 const std::vector<Bson>& payloads,
                                 const std::vector<std::string>& ids) {
  mongoc_client_t* client = mongoc_client_session_get_client(session);
  const std::int64_t now = now_ms();
  for (std::size_t i = 0; i < events.size(); ++i) {
    const store::Event& event = events[i];
    const std::string& id = ids[i];
    std::optional<StoredEvent> stored;
    if (event.event_id) {
      auto found = find_all(client, database_, session, commands::find_event(id), "find event");
      if (!found.empty()) stored = reported([&] { return read_event(found.front().get()); });
    }
    commands::PublishPlan plan = commands::plan_publish(event, stored);
    std::vector<std::string> targets;
    if (event.handlers) {
      const auto found =
          ids_of(find_all(client, database_, session, commands::find_subscriptions(*event.handlers),
                          "find subscriptions"));
      reported([&] { commands::check_subscribed(*event.handlers, found); });
      targets = *event.handlers;
    } else {
      targets = ids_of(find_all(client, database_, session, commands::find_subscribers(plan.type),
                                "find subscribers"));
    }
    commands::add_targets(plan, targets);

    std::int64_t sequence = 0;
    if (plan.key && !plan.added.empty()) {
      Bson reply =
          run(client, database_, session, commands::next_sequence(*plan.key), "next key sequence");
      sequence = reported([&] { return read_counter(value_of(reply).get()); });
    }
    if (plan.new_event) {
      NewEvent e{id, event.type, event.key, payloads[i].get(), plan.added, now};
      run(client, database_, session, commands::insert_event(e), "insert event");
    } else if (!plan.added.empty()) {
      run(client, database_, session, commands::add_event_handlers(id, plan.added),
          "add event handlers");
    }
    if (plan.added.empty()) continue;
    const std::int64_t due = now + (event.delay ? event.delay->count() : 0);
    std::vector<NewDelivery> deliveries;
    for (const auto& handler : plan.added)
      deliveries.push_back({id, handler, plan.key, sequence, due, now});
    run(client, database_, session, commands::insert_deliveries(deliveries), "insert deliveries");
  }
}

std::vector<std::string> MongoStore::publish_events(mongoc_client_session_t* session,
                                                    const std::vector<store::Event>& events,
                                                    bool batch) {
  const Checked checked = check_events(events, batch);
  if (session) {
    require_session(session);
    publish_checked(session, events, checked.payloads, checked.ids);
  } else if (!events.empty()) {
    in_transaction([&](mongoc_client_session_t* s) {
      publish_checked(s, events, checked.payloads, checked.ids);
    });
  }
  return checked.ids;
}

std::string MongoStore::publish(const store::Event& event) {
  return publish_events(nullptr, {event}, false).front();
}

std::vector<std::string> MongoStore::publish_batch(const std::vector<store::Event>& events) {
  return publish_events(nullptr, events, true);
}

std::string MongoStore::publish(mongoc_client_session_t* session, const store::Event& event) {
  if (!session) require_session(session);
  return publish_events(session, {event}, false).front();
}

std::vector<std::string> MongoStore::publish_batch(mongoc_client_session_t* session,
                                                   const std::vector<store::Event>& events) {
  if (!session) require_session(session);
  return publish_events(session, events, true);
}

}  // namespace relaybus::mongo

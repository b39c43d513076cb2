// order_mailer: relaybus's C++ worker runtime in one small program. It publishes three
// order.placed events, then handles them: "mailer" with a plain handler (returning
// completes the delivery, throwing fails the attempt) and "ledger" with a transactional
// one, whose row and completion commit together. A payload without an order id is a
// mistake no retry fixes: the mailer buries it (rb::Bury) instead of failing it 25 times.
// It stops on SIGINT or SIGTERM (rb::StopSignals), or once the six deliveries are handled.
// Set up the database first (README.md next to this file); Dispatcher::start() says what to
// run when something is missing.
//
//   order_mailer [CONNINFO]     (no CONNINFO: libpq's PG* environment variables)
#include <libpq-fe.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>

#include <relaybus/client/dispatcher.hpp>
#include <relaybus/client/payload.hpp>
#include <relaybus/client/pg_store.hpp>
#include <relaybus/client/stop_signals.hpp>

namespace rb = relaybus::client;

namespace {

// The ledger handler's write, on the connection its completion commits on.
void insert_entry(PGconn* conn, const rb::Delivery& d) {
  const char* values[] = {d.event_id.c_str(), d.payload.c_str()};
  PGresult* res =
      PQexecParams(conn, "INSERT INTO ledger_entries (event_id, payload) VALUES ($1, $2)", 2,
                   nullptr, values, nullptr, nullptr, 0);
  const bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
  PQclear(res);
  // Throwing fails the attempt; the runtime rolls the transaction back first.
  if (!ok) throw std::runtime_error(PQerrorMessage(conn));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string conninfo = argc > 1 ? argv[1] : "";
  rb::StopSignals signals;  // SIGINT and SIGTERM end signals.wait_for() from here on
  try {
    rb::PgStore publisher(conninfo);  // each publish commits on its own here
    for (int i = 1; i <= 3; ++i) {
      rb::Event e;
      e.type = "order.placed";
      e.key = "customer-" + std::to_string(i % 2);  // per-key order for each customer
      e.payload = "{\"order_id\": " + std::to_string(i) + "}";
      std::printf("published %s\n", publisher.publish(e).c_str());
    }

    std::atomic<int> handled{0};
    std::map<std::string, rb::Handler> plain{
        {"mailer", [&](const rb::Delivery& d) {
           const nlohmann::json order = rb::payload(d);
           if (!order.contains("order_id")) throw rb::Bury("no order_id in " + d.payload);
           std::printf("mailer: mail for order %s (attempt %d)\n", order["order_id"].dump().c_str(),
                       d.attempts + 1);
           ++handled;
         }}};
    std::map<std::string, rb::TransactionalHandler> transactional{
        {"ledger", [&](const rb::Delivery& d, rb::Transaction&, rb::Store& store) {
           insert_entry(rb::pg_connection(store), d);
           std::printf("ledger: entry for event %s\n", d.event_id.c_str());
           ++handled;
         }}};

    rb::DispatcherConfig config;
    config.worker_prefix = "order-mailer";  // the worker name gets a random suffix
    config.poll_interval = std::chrono::milliseconds(500);
    rb::Dispatcher dispatcher(rb::pg_store_factory(conninfo), config, plain, transactional);

    dispatcher.start();  // throws rb::SetupError, saying what to run, if the database is not ready
    while (handled < 6 && !signals.wait_for(std::chrono::milliseconds(20))) {
    }
    dispatcher.stop();  // releases what runs past the grace, flushes completions, relinquishes

    const rb::DispatcherCounters c = dispatcher.counters();
    std::printf("done: %zu handled, %zu failed, %zu released\n", c.succeeded, c.failed, c.released);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "order_mailer: %s\n", e.what());
    return 1;
  }
}

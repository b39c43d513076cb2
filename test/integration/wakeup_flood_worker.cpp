// The worker of wakeup_flood.sh: a Dispatcher for one handler with a 10 s poll interval (so
// anything it claims sooner was woken by a notification) and the wake-up interval given in
// microseconds. It prints "handled EVENT_ID" for each delivery, and its counters when
// SIGTERM stops it.
//
//   wakeup_flood_worker CONNINFO HANDLER WAKEUP_INTERVAL_US
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <string>

#include <relaybus/client/dispatcher.hpp>
#include <relaybus/client/pg_store.hpp>

namespace rb = relaybus::client;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: wakeup_flood_worker CONNINFO HANDLER WAKEUP_INTERVAL_US\n");
    return 2;
  }
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);  // before any thread starts
  try {
    rb::DispatcherConfig config;
    config.worker_prefix = "flooded";
    config.poll_interval = std::chrono::seconds(10);
    config.wakeup_interval = std::chrono::microseconds(std::atol(argv[3]));
    rb::Dispatcher dispatcher(rb::pg_store_factory(argv[1]), config,
                              {{argv[2], [](const rb::Delivery& d) {
                                  std::printf("handled %s\n", d.event_id.c_str());
                                  std::fflush(stdout);
                                }}});
    dispatcher.start();
    int signal = 0;
    sigwait(&stop_signals, &signal);
    dispatcher.stop();
    const rb::DispatcherCounters c = dispatcher.counters();
    std::printf("counters: %zu claims, %zu wakeups, %zu handled\n", c.claims, c.wakeups,
                c.succeeded);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wakeup_flood_worker: %s\n", e.what());
    return 1;
  }
}

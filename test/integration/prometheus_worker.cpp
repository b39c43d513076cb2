// prometheus.sh's C++ worker: a Dispatcher of the installed runtime for one handler, run
// until it has handled COUNT deliveries; then its counters as rb::prometheus_text prints
// them, for promtool check metrics.
//
//   prometheus_worker CONNINFO HANDLER COUNT
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <thread>

#include <relaybus/client/dispatcher.hpp>
#include <relaybus/client/pg_store.hpp>
#include <relaybus/client/prometheus_text.hpp>

namespace rb = relaybus::client;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: prometheus_worker CONNINFO HANDLER COUNT\n");
    return 2;
  }
  try {
    rb::DispatcherConfig config;
    config.worker_prefix = "prom-cpp";
    config.poll_interval = std::chrono::milliseconds(100);
    rb::Dispatcher dispatcher(rb::pg_store_factory(argv[1]), config,
                              {{argv[2], [](const rb::Delivery&) {}}});
    dispatcher.start();
    const std::size_t want = std::strtoul(argv[3], nullptr, 10);
    for (int i = 0; i < 300 && dispatcher.counters().succeeded < want; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    dispatcher.stop();
    std::fputs(rb::prometheus_text({{"prom-cpp", dispatcher.counters()}}).c_str(), stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prometheus_worker: %s\n", e.what());
    return 1;
  }
}

// Dispatchers' counters in Prometheus's text exposition format (version 0.0.4), for a
// program to serve at its /metrics with whatever HTTP server it has (Content-Type
// kPrometheusContentType). C++ has no exporter every program uses, so the runtime writes
// the text and leaves serving it to the program, as a Python or Node.js worker leaves it
// to prometheus_client or prom-client.
//
// Each DispatcherCounters field is a counter, relaybus_worker_<field>_total, with a sample
// per named dispatcher (label worker): the family once, however many dispatchers a
// process runs. The names and meanings are the Python and Node.js workers' where they
// count the same thing.
#pragma once

#include "dispatcher.hpp"

#include <string>
#include <utility>
#include <vector>

namespace relaybus::client {

inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

// One scrape's text: the families in a fixed order, a sample per (worker name, counters)
// in the order given. Worker names are escaped as the format requires (backslash, double
// quote, newline); any name is accepted.
std::string prometheus_text(const std::vector<std::pair<std::string, DispatcherCounters>>& workers);

}  // namespace relaybus::client

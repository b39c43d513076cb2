#include "prometheus_text.hpp"

#include <cstddef>

namespace relaybus::client {

namespace {

struct Family {
  const char* name;
  const char* help;
  std::size_t DispatcherCounters::*field;
};

const Family kFamilies[] = {
    {"claims", "claim statements sent", &DispatcherCounters::claims},
    {"claimed", "deliveries received from claims", &DispatcherCounters::claimed},
    {"succeeded", "handlers that returned", &DispatcherCounters::succeeded},
    {"failed", "handlers that threw (Bury included)", &DispatcherCounters::failed},
    {"buried", "handlers that threw Bury: dead-lettered at once", &DispatcherCounters::buried},
    {"lost", "transactional handlers rolled back because the lease was lost",
     &DispatcherCounters::lost},
    {"released", "deliveries given back at shutdown", &DispatcherCounters::released},
    {"wakeups", "notifications that ended a poll wait", &DispatcherCounters::wakeups},
};

// A label value as the text format quotes it.
std::string escaped(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string prometheus_text(
    const std::vector<std::pair<std::string, DispatcherCounters>>& workers) {
  std::string out;
  for (const Family& f : kFamilies) {
    const std::string name = std::string("relaybus_worker_") + f.name + "_total";
    out += "# HELP " + name + " relaybus worker: " + f.help + "\n";
    out += "# TYPE " + name + " counter\n";
    for (const auto& [worker, counters] : workers)
      out += name + "{worker=\"" + escaped(worker) + "\"} " + std::to_string(counters.*(f.field)) +
             "\n";
  }
  return out;
}

}  // namespace relaybus::client

// The benchmark's moving parts: publishers and dispatchers each run in a process of their
// own (forked before the parent opens any connection), and write what they did to a file
// the harness reads afterwards. Times are wall-clock microseconds since the epoch, so the
// files of different processes can be joined.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "client/dispatcher.hpp"

namespace relaybus::bench {

std::int64_t now_us();

// Forks; the child runs `body(context)` and leaves with its result through _exit (never touching
// the parent's state on the way out).
pid_t spawn_process(int (*body)(void*), void* context);

// Sends SIGTERM to every child and waits for all; returns how many exited non-zero.
int stop_and_wait(const std::vector<pid_t>& children);
// Waits for every child; returns how many exited non-zero.
int wait_all(const std::vector<pid_t>& children);

struct DispatcherProcess {
  std::string conninfo;
  std::string handler;
  client::DispatcherConfig config;
  std::string out_path;  // one line per handled delivery
};
// Runs a dispatcher until SIGTERM, then stops it gracefully and writes its records:
// event_id, handler, key (or -), n (from the payload), handled_at_us, attempts.
int run_dispatcher_process(const DispatcherProcess& p);

struct PublisherProcess {
  std::string conninfo;
  int index = 0;
  long long events = 0;   // how many to publish (0 = until `duration_s`)
  int batch = 1;          // events per call; 1 uses publish(), more use publish_batch()
  double rate = 0;        // events per second offered by this process; 0 = as fast as it can
  double duration_s = 0;  // stop after this long (0 = when `events` are published)
  int keys = 100;         // every other event is keyed, over this many keys per process
  std::string type = "bench.event";
  std::string out_path;  // E id key n commit_us  /  C call_us batch
};
int run_publisher_process(const PublisherProcess& p);

// Extracts the integer field `name` of a flat JSON object (the benchmark's payloads).
long long json_int(const std::string& json, const std::string& name, long long fallback);

// Writes `{"k": v, ...}` for the summary files the harness reads.
class JsonObject {
 public:
  JsonObject& add(const std::string& key, double value);
  JsonObject& add(const std::string& key, long long value);
  JsonObject& add(const std::string& key, const std::string& value);
  JsonObject& add(const std::string& key, bool value);
  std::string str() const { return "{" + body_ + "}"; }
  void write(const std::string& path) const;

 private:
  void key(const std::string& k);
  std::string body_;
};

// The bookkeeping queries of the harness carry this marker, so that statement counts can
// leave them out.
constexpr const char* kHarness = "/*relaybus-bench-harness*/";

}  // namespace relaybus::bench

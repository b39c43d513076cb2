// relaybus-bench drain|publish|mixed: the processes of one benchmark run, the measurement
// window (wall time, and the store's log: PostgreSQL's WAL or MongoDB's oplog), and progress
// on stderr; --db is either store (client/tool/store_uri.hpp). The options and their defaults
// are declared in bench_main.cpp. Validation and the database
// statistics are the harness's (bench/run): it reads the files these commands write.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>

#include "bench_commands.hpp"
#include "bench_meter.hpp"
#include "bench_processes.hpp"

namespace relaybus::bench {

namespace {

using Clock = std::chrono::steady_clock;

client::DispatcherConfig dispatcher_config(const tool::Parsed& args) {
  client::DispatcherConfig c;
  c.worker_prefix = args.get<std::string>("worker-prefix");
  c.concurrency = args.get<int>("concurrency");
  c.handler_threads = args.get<int>("handler-threads");
  c.batch_size = args.get<int>("batch");
  c.poll_interval = std::chrono::milliseconds(args.get<int>("poll-ms"));
  c.lease = std::chrono::milliseconds(args.get<int>("lease-ms"));
  c.completion_window = std::chrono::microseconds(args.get<int>("window-us"));
  c.wakeup_interval = std::chrono::microseconds(args.get<int>("wakeup-us"));
  c.listen = args.get<bool>("listen");
  return c;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The measurement window: wall time and the store's log.
struct Window {
  BenchMeter& meter;
  Clock::time_point start;
  std::int64_t start_us = 0;  // wall clock: the records' time base
  explicit Window(BenchMeter& m) : meter(m) {
    meter.mark();
    start = Clock::now();
    start_us = now_us();
  }
  // Adds <log>_bytes (and <log>_entries where measured) to a summary.
  void add_log(JsonObject& summary) {
    const LogUse use = meter.since_mark();
    const std::string name = meter.log_name();
    summary.add(name + "_bytes", use.bytes);
    if (use.entries >= 0) summary.add(name + "_entries", use.entries);
  }
};

std::vector<pid_t> spawn_dispatchers(const tool::Parsed& args, const std::string& conninfo,
                                     const std::string& out,
                                     std::vector<DispatcherProcess>& specs) {
  const int n = args.get<int>("dispatchers");
  specs.resize(static_cast<std::size_t>(n));
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    auto& s = specs[static_cast<std::size_t>(i)];
    s.conninfo = conninfo;
    s.handler = args.get<std::string>("handler");
    s.config = dispatcher_config(args);
    s.out_path = out + ".dispatcher-" + std::to_string(i) + ".tsv";
    pids.push_back(spawn_process(
        [](void* p) { return run_dispatcher_process(*static_cast<DispatcherProcess*>(p)); }, &s));
  }
  return pids;
}

}  // namespace

int drain_command(const tool::Parsed& args) {
  const std::string conninfo = args.get<std::string>("db");
  const std::string out = args.get<std::string>("out");
  const double limit = args.get<double>("duration-s");
  auto meter = bench_meter(conninfo);
  const long long total = meter->unfinished();
  Window window(*meter);
  std::vector<DispatcherProcess> specs;
  auto pids = spawn_dispatchers(args, conninfo, out, specs);
  long long left = total;
  bool drained = false;
  auto next_report = Clock::now();
  for (;;) {
    left = meter->unfinished();
    if (left == 0) {
      drained = true;
      break;
    }
    if (seconds_since(window.start) > limit) break;
    if (Clock::now() >= next_report) {
      const double t = seconds_since(window.start);
      std::fprintf(stderr, "drain: %6.1f s  %lld of %lld done  (%.0f/s)\n", t, total - left, total,
                   (total - left) / std::max(t, 1e-3));
      next_report += std::chrono::seconds(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const double elapsed = seconds_since(window.start);
  JsonObject summary;
  window.add_log(summary);
  const int failed = stop_and_wait(pids);
  std::fprintf(stderr, "drain: %s after %.2f s, %lld left\n", drained ? "drained" : "TIMED OUT",
               elapsed, left);
  summary.add("scenario", std::string("drain"))
      .add("start_us", static_cast<long long>(window.start_us))
      .add("deliveries", total)
      .add("elapsed_s", elapsed)
      .add("drained", drained)
      .add("left", left)
      .add("processes_failed", static_cast<long long>(failed))
      .write(out + ".summary.json");
  return failed == 0 ? 0 : 1;
}

int publish_command(const tool::Parsed& args) {
  const std::string conninfo = args.get<std::string>("db");
  const std::string out = args.get<std::string>("out");
  const int publishers = args.get<int>("publishers");
  const long long events = args.get<long long>("events");
  auto meter = bench_meter(conninfo);
  Window window(*meter);
  std::vector<PublisherProcess> specs(static_cast<std::size_t>(publishers));
  std::vector<pid_t> pids;
  for (int i = 0; i < publishers; ++i) {
    auto& s = specs[static_cast<std::size_t>(i)];
    s.conninfo = conninfo;
    s.index = i;
    s.events = events / publishers + (i < events % publishers ? 1 : 0);
    s.batch = args.get<int>("batch");
    s.keys = args.get<int>("keys");
    s.type = args.get<std::string>("type");
    s.out_path = out + ".publisher-" + std::to_string(i) + ".tsv";
    pids.push_back(spawn_process(
        [](void* p) { return run_publisher_process(*static_cast<PublisherProcess*>(p)); }, &s));
  }
  std::atomic<bool> done{false};
  std::thread progress([&] {
    // Progress for long runs: the event count, once a second, until the publishers exit.
    while (true) {
      for (int i = 0; i < 10; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (done) return;
      }
      std::fprintf(stderr, "publish: %6.1f s\n", seconds_since(window.start));
    }
  });
  const int failed = wait_all(pids);
  const double elapsed = seconds_since(window.start);
  JsonObject summary;
  window.add_log(summary);
  done = true;
  progress.join();
  std::fprintf(stderr, "publish: %lld events in %.2f s (%.0f/s)\n", events, elapsed,
               events / elapsed);
  summary.add("scenario", std::string("publish"))
      .add("events", events)
      .add("elapsed_s", elapsed)
      .add("processes_failed", static_cast<long long>(failed))
      .write(out + ".summary.json");
  return failed == 0 ? 0 : 1;
}

int mixed_command(const tool::Parsed& args) {
  const std::string conninfo = args.get<std::string>("db");
  const std::string out = args.get<std::string>("out");
  const double rate = args.get<double>("rate");
  const double duration = args.get<double>("duration-s");
  const double drain_limit = args.get<double>("drain-timeout-s");
  const int publishers = args.get<int>("publishers");
  auto meter = bench_meter(conninfo);
  Window window(*meter);
  std::vector<DispatcherProcess> dispatcher_specs;
  auto dispatchers = spawn_dispatchers(args, conninfo, out, dispatcher_specs);
  std::vector<PublisherProcess> specs(static_cast<std::size_t>(publishers));
  std::vector<pid_t> pids;
  for (int i = 0; i < publishers; ++i) {
    auto& s = specs[static_cast<std::size_t>(i)];
    s.conninfo = conninfo;
    s.index = i;
    s.rate = rate / publishers;
    s.duration_s = duration;
    s.batch = 1;
    s.keys = args.get<int>("keys");
    s.out_path = out + ".publisher-" + std::to_string(i) + ".tsv";
    pids.push_back(spawn_process(
        [](void* p) { return run_publisher_process(*static_cast<PublisherProcess*>(p)); }, &s));
  }
  // The backlog (unfinished deliveries) sampled every 250 ms while publishing.
  long long backlog_max = 0;
  auto next_report = Clock::now() + std::chrono::seconds(1);
  while (seconds_since(window.start) < duration) {
    const long long backlog = meter->unfinished();
    backlog_max = std::max(backlog_max, backlog);
    if (Clock::now() >= next_report) {
      std::fprintf(stderr, "mixed: %5.1f s  backlog %lld\n", seconds_since(window.start), backlog);
      next_report += std::chrono::seconds(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  int failed = wait_all(pids);
  const double publish_elapsed = seconds_since(window.start);
  bool drained = false;
  const auto drain_start = Clock::now();
  long long left = 0;
  while (seconds_since(drain_start) < drain_limit) {
    left = meter->unfinished();
    backlog_max = std::max(backlog_max, left);
    if (left == 0) {
      drained = true;
      break;
    }
    // With a backlog, statistics() reads every lane's positions above its cursor: polled
    // every 50 ms it took a core of the two the run has. Every 250 ms then, as while
    // publishing, and every 50 ms near the end, where the drain's end is timed.
    std::this_thread::sleep_for(std::chrono::milliseconds(left > 1000 ? 250 : 50));
  }
  const double elapsed = seconds_since(window.start);
  JsonObject summary;
  window.add_log(summary);
  failed += stop_and_wait(dispatchers);
  std::fprintf(stderr, "mixed: published for %.2f s, %s after %.2f s, backlog max %lld\n",
               publish_elapsed, drained ? "drained" : "NOT DRAINED", elapsed, backlog_max);
  summary.add("scenario", std::string("mixed"))
      .add("offered_rate", rate)
      .add("publish_elapsed_s", publish_elapsed)
      .add("elapsed_s", elapsed)
      .add("backlog_max", backlog_max)
      .add("drained", drained)
      .add("left", left)
      .add("processes_failed", static_cast<long long>(failed))
      .write(out + ".summary.json");
  return failed == 0 ? 0 : 1;
}

}  // namespace relaybus::bench

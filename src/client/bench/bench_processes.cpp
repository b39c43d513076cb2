#include "bench_processes.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <thread>

#include "connection.hpp"
#include "client/tool/json_text.hpp"
#include "client/tool/store_uri.hpp"

namespace relaybus::bench {

using tool::is_mongodb_uri;
using tool::json_string;
using tool::open_store;
using tool::store_factory;

namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_term(int) {
  g_stop = 1;
}

void install_term_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_term;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

struct Handled {
  std::string event_id, handler, key;
  long long n;
  std::int64_t at_us;
  int attempts;
};

}  // namespace

std::int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

pid_t spawn_process(int (*body)(void*), void* context) {
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    int code = 1;
    try {
      code = body(context);
    } catch (const std::exception& e) {
      std::cerr << "relaybus-bench child: " << e.what() << std::endl;
    }
    std::fflush(nullptr);
    _exit(code);
  }
  return pid;
}

int wait_all(const std::vector<pid_t>& children) {
  int bad = 0;
  for (pid_t pid : children) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++bad;
  }
  return bad;
}

int stop_and_wait(const std::vector<pid_t>& children) {
  for (pid_t pid : children) kill(pid, SIGTERM);
  return wait_all(children);
}

long long json_int(const std::string& json, const std::string& name, long long fallback) {
  const std::string needle = "\"" + name + "\"";
  auto at = json.find(needle);
  if (at == std::string::npos) return fallback;
  at = json.find(':', at + needle.size());
  if (at == std::string::npos) return fallback;
  return std::strtoll(json.c_str() + at + 1, nullptr, 10);
}

int run_dispatcher_process(const DispatcherProcess& p) {
  install_term_handler();
  std::mutex mutex;
  std::vector<Handled> handled;
  handled.reserve(1 << 16);
  client::DispatcherConfig config = p.config;
  std::map<std::string, client::Handler> handlers{
      {p.handler, [&](const client::Delivery& d) {
         // The no-op handler: only note what ran, and when.
         Handled h{d.event_id, d.handler, d.has_key ? d.key : "-", json_int(d.payload, "n", -1),
                   now_us(),   d.attempts};
         std::lock_guard<std::mutex> lock(mutex);
         handled.push_back(std::move(h));
       }}};
  client::Dispatcher dispatcher(store_factory(p.conninfo), config, handlers);
  dispatcher.start();
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  dispatcher.stop();
  std::ofstream out(p.out_path);
  std::lock_guard<std::mutex> lock(mutex);
  for (const auto& h : handled)
    out << h.event_id << '\t' << h.handler << '\t' << h.key << '\t' << h.n << '\t' << h.at_us
        << '\t' << h.attempts << '\n';
  const auto c = dispatcher.counters();
  std::cerr << "dispatcher " << dispatcher.worker() << ": claims " << c.claims << ", handled "
            << c.succeeded << ", failed " << c.failed << ", released " << c.released
            << ", wake-ups " << c.wakeups << std::endl;
  return out ? 0 : 1;
}

int run_publisher_process(const PublisherProcess& p) {
  install_term_handler();
  // PostgreSQL: the SQL functions through a plain connection, as any client calls them (and
  // as 0.1.0 has them); MongoDB: the store's publish and publish_batch.
  std::unique_ptr<Connection> db;
  std::unique_ptr<store::Store> mongo;
  if (is_mongodb_uri(p.conninfo)) {
    mongo = open_store(p.conninfo);
  } else {
    db = std::make_unique<Connection>(p.conninfo);
  }
  std::ofstream out(p.out_path);
  std::vector<long long> key_counter(static_cast<std::size_t>(std::max(1, p.keys)), 0);
  const std::string single = "SELECT relaybus.publish($1, $2::jsonb, $3, $4)";
  const std::string batch_sql = "SELECT count(*) FROM relaybus.publish_batch($1::jsonb)";
  const auto start = std::chrono::steady_clock::now();
  long long seq = 0;
  const int batch = std::max(1, p.batch);
  std::string lines;
  for (;;) {
    if (g_stop) break;
    if (p.events > 0 && seq >= p.events) break;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (p.duration_s > 0 && elapsed >= p.duration_s) break;
    // Open loop at the offered rate: the next call is due at seq / rate; a late call goes
    // at once, without skipping (so a slow database shows up as latency, not fewer events).
    if (p.rate > 0) {
      const double due = static_cast<double>(seq) / p.rate;
      if (due > elapsed) std::this_thread::sleep_for(std::chrono::duration<double>(due - elapsed));
    }
    int n_this = batch;
    if (p.events > 0) n_this = static_cast<int>(std::min<long long>(batch, p.events - seq));
    struct Ev {
      std::string id, key;
      long long n;
    };
    std::vector<Ev> evs;
    for (int i = 0; i < n_this; ++i, ++seq) {
      Ev e;
      e.id = "p" + std::to_string(p.index) + "-" + std::to_string(seq);
      if (seq % 2 == 0) {
        const long long k = (seq / 2) % static_cast<long long>(key_counter.size());
        e.key = "p" + std::to_string(p.index) + "-k" + std::to_string(k);
        e.n = ++key_counter[static_cast<std::size_t>(k)];
      } else {
        e.n = seq;
      }
      evs.push_back(std::move(e));
    }
    const std::int64_t sent = now_us();
    if (mongo) {
      std::vector<store::Event> batch_events;
      for (const auto& e : evs) {
        store::Event ev;
        ev.type = p.type;
        ev.event_id = e.id;
        if (!e.key.empty()) ev.key = e.key;
        ev.payload = "{\"n\":" + std::to_string(e.n) + ",\"p\":" + std::to_string(p.index) + "}";
        batch_events.push_back(std::move(ev));
      }
      if (n_this == 1) {
        mongo->publish(batch_events[0]);
      } else {
        mongo->publish_batch(batch_events);
      }
    } else if (n_this == 1) {
      const auto& e = evs[0];
      const std::string payload =
          "{\"n\":" + std::to_string(e.n) + ",\"p\":" + std::to_string(p.index) + "}";
      std::optional<std::string> key;
      if (!e.key.empty()) key = e.key;
      db->query(single, {p.type, payload, key, e.id});
    } else {
      std::string json = "[";
      for (std::size_t i = 0; i < evs.size(); ++i) {
        const auto& e = evs[i];
        if (i) json += ',';
        json += "{\"type\":" + json_string(p.type) + ",\"id\":\"" + e.id +
                "\",\"payload\":{\"n\":" + std::to_string(e.n) +
                ",\"p\":" + std::to_string(p.index) + "}";
        if (!e.key.empty()) json += ",\"key\":\"" + e.key + "\"";
        json += '}';
      }
      json += ']';
      db->query(batch_sql, {json});
    }
    const std::int64_t committed = now_us();
    lines += "C\t" + std::to_string(committed - sent) + '\t' + std::to_string(n_this) + '\n';
    for (const auto& e : evs)
      lines += "E\t" + e.id + '\t' + (e.key.empty() ? "-" : e.key) + '\t' + std::to_string(e.n) +
               '\t' + std::to_string(committed) + '\n';
    if (lines.size() > (1 << 20)) {
      out << lines;
      lines.clear();
    }
  }
  out << lines;
  return out ? 0 : 1;
}

JsonObject& JsonObject::add(const std::string& k, double value) {
  key(k);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6f", value);
  body_ += buf;
  return *this;
}
JsonObject& JsonObject::add(const std::string& k, long long value) {
  key(k);
  body_ += std::to_string(value);
  return *this;
}
JsonObject& JsonObject::add(const std::string& k, const std::string& value) {
  key(k);
  body_ += json_string(value);
  return *this;
}
JsonObject& JsonObject::add(const std::string& k, bool value) {
  key(k);
  body_ += value ? "true" : "false";
  return *this;
}
void JsonObject::key(const std::string& k) {
  if (!body_.empty()) body_ += ',';
  body_ += json_string(k) + ":";
}
void JsonObject::write(const std::string& path) const {
  std::ofstream out(path);
  out << str() << '\n';
}

}  // namespace relaybus::bench

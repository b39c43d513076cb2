// What the dispatcher's tests share: a quick configuration, a bounded wait, a gate.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "client/dispatcher.hpp"

namespace relaybus::client::testing {

inline DispatcherConfig quick_config() {
  using namespace std::chrono_literals;
  DispatcherConfig c;
  c.worker_prefix = "test";
  c.poll_interval = 20ms;
  c.lease = 3000ms;
  c.log = [](const std::string&) {};
  return c;
}

inline bool eventually(const std::function<bool()>& condition,
                       std::chrono::milliseconds within = std::chrono::seconds(3)) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return condition();
}

// A gate handlers wait on until the test opens it.
struct Gate {
  std::mutex m;
  std::condition_variable cv;
  bool open = false;
  std::atomic<int> waiting{0};
  void pass() {
    std::unique_lock<std::mutex> lock(m);
    ++waiting;
    cv.wait(lock, [this] { return open; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(m);
    open = true;
    cv.notify_all();
  }
};

}  // namespace relaybus::client::testing

#include "stop_signals.hpp"

#include <semaphore.h>
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <ctime>
#include <stdexcept>
#include <system_error>

namespace relaybus::client {

namespace {

// The signal handler may only touch these: async-signal-safe calls (sem_post, sigaction,
// raise) and lock-free atomics.
std::atomic<bool> g_installed{false};
std::atomic<int> g_received{0};
sem_t g_semaphore;
struct sigaction g_previous_int, g_previous_term;

void on_stop_signal(int signal) {
  if (g_received.exchange(signal) != 0) {
    // A second signal: give up on the graceful stop, as if we were not there.
    struct sigaction fallback {};
    fallback.sa_handler = SIG_DFL;
    sigemptyset(&fallback.sa_mask);
    sigaction(signal, &fallback, nullptr);
    raise(signal);
    return;
  }
  sem_post(&g_semaphore);
}

// Waits on the semaphore until `deadline` (nullptr: for ever), through interruptions.
bool wait_on(const timespec* deadline) {
  for (;;) {
    const int rc = deadline ? sem_timedwait(&g_semaphore, deadline) : sem_wait(&g_semaphore);
    if (rc == 0) {
      sem_post(&g_semaphore);  // every later wait() returns at once too
      return true;
    }
    if (errno == EINTR) continue;
    if (errno == ETIMEDOUT) return false;
    throw std::system_error(errno, std::generic_category(), "relaybus: waiting for a signal");
  }
}

}  // namespace

StopSignals::StopSignals() {
  if (g_installed.exchange(true))
    throw std::logic_error("relaybus: only one StopSignals may exist at a time");
  g_received = 0;
  sem_init(&g_semaphore, 0, 0);
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, &g_previous_int);
  sigaction(SIGTERM, &action, &g_previous_term);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &g_previous_int, nullptr);
  sigaction(SIGTERM, &g_previous_term, nullptr);
  sem_destroy(&g_semaphore);
  g_installed = false;
}

int StopSignals::wait() {
  wait_on(nullptr);
  return g_received.load();
}

std::optional<int> StopSignals::wait_for(std::chrono::milliseconds timeout) {
  timespec deadline{};
  clock_gettime(CLOCK_REALTIME, &deadline);  // sem_timedwait's clock
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count();
  deadline.tv_sec += static_cast<time_t>(ns / 1000000000);
  deadline.tv_nsec += static_cast<long>(ns % 1000000000);
  if (deadline.tv_nsec >= 1000000000) {
    deadline.tv_sec += 1;
    deadline.tv_nsec -= 1000000000;
  }
  if (!wait_on(&deadline)) return std::nullopt;
  return g_received.load();
}

std::optional<int> StopSignals::received() const {
  const int signal = g_received.load();
  if (signal == 0) return std::nullopt;
  return signal;
}

int wait_for_stop_signal() {
  StopSignals signals;
  return signals.wait();
}

}  // namespace relaybus::client

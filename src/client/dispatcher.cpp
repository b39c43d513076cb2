#include "dispatcher.hpp"

#include <algorithm>
#include <iostream>
#include <stdexcept>

#include "worker_name.hpp"

namespace relaybus::client {

namespace {

// A log function that owns what it needs: the pieces may call it from any thread.
std::function<void(const std::string&)> make_log(std::function<void(const std::string&)> sink,
                                                 std::string worker) {
  return [sink = std::move(sink), worker = std::move(worker)](const std::string& message) {
    if (sink) {
      sink(worker + ": " + message);
    } else {
      std::cerr << "relaybus dispatcher " << worker << ": " << message << std::endl;
    }
  };
}

std::vector<std::string> names_of(
    const std::map<std::string, Handler>& handlers,
    const std::map<std::string, TransactionalHandler>& transactional) {
  std::vector<std::string> names;
  for (const auto& entry : handlers) names.push_back(entry.first);
  for (const auto& entry : transactional) names.push_back(entry.first);
  std::sort(names.begin(), names.end());
  return names;
}

// A transactional handler needs begin(): asks one store instance before anything runs.
const StoreFactory& checked_for_transactions(
    const StoreFactory& stores, const std::map<std::string, TransactionalHandler>& handlers) {
  if (handlers.empty()) return stores;
  std::unique_ptr<Store> probe = stores();
  if (!probe || !probe->begin())
    throw std::invalid_argument(
        "relaybus: the store has no transactions, so transactional handler " +
        handlers.begin()->first + " cannot complete inside one");
  return stores;
}

ClaimLoop::Options claim_options(const DispatcherConfig& c) {
  ClaimLoop::Options o;
  o.batch_size = std::max(1, c.batch_size);
  o.concurrency = std::max(1, c.concurrency);
  o.max_unsettled = std::max<std::size_t>(1, c.max_unsettled);
  o.poll_interval = c.poll_interval;
  o.wakeup_interval = c.wakeup_interval;
  o.lease = c.lease;
  o.listen = c.listen;
  o.recheck_unsubscribed = c.recheck_unsubscribed;
  return o;
}

// Each instance named for the server's monitoring before anyone uses it.
StoreFactory named(StoreFactory stores, std::string name) {
  return [stores = std::move(stores), name = std::move(name)] {
    std::unique_ptr<Store> store = stores();
    store->identify(name);
    return store;
  };
}

}  // namespace

Dispatcher::Dispatcher(StoreFactory stores, DispatcherConfig config,
                       std::map<std::string, Handler> handlers,
                       std::map<std::string, TransactionalHandler> transactional)
    : stores_(checked_for_transactions(stores, transactional)),
      config_(std::move(config)),
      worker_{make_worker_name(config_.worker_prefix), make_holder()},
      log_(make_log(config_.log, worker_.name)),
      names_(names_of(handlers, transactional)),
      named_stores_(named(stores_, config_.application_name.empty() ? "relaybus-cpp " + worker_.name
                                                                    : config_.application_name)),
      batcher_(
          config_.completion_window, config_.max_completion_batch,
          [this](std::size_t n) { claims_.settled_returned(n); }, log_),
      // A returned handler frees its place before its outcome is queued: the batcher may
      // settle it at once, and settled_returned must find it counted as returned.
      pool_(handlers, transactional, named_stores_,
            HandlerPool::Sinks{[this](std::string token) {
                                 claims_.returned(1);
                                 batcher_.complete(std::move(token));
                               },
                               [this](std::string token, std::string error) {
                                 claims_.returned(1);
                                 batcher_.fail(std::move(token), std::move(error));
                               },
                               [this](std::string token, std::string error) {
                                 claims_.returned(1);
                                 batcher_.bury(std::move(token), std::move(error));
                               },
                               [this](std::size_t n) { claims_.settled(n); },
                               [this] { batcher_.flush_now(); }},
            log_),
      claims_(
          named_stores_, worker_, names_, claim_options(config_),
          [this](std::vector<Delivery> got) { pool_.submit(std::move(got)); }, log_),
      renewer_(
          named_stores_, worker_, config_.lease, [this] { return claims_.in_flight() > 0; },
          [this] { return claims_.lanes_renewed_at(); }, log_) {}

Dispatcher::~Dispatcher() {
  stop();
}

void Dispatcher::start() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (started_) return;
  }
  if (names_.empty())
    throw std::invalid_argument(
        "relaybus: the Dispatcher has no handler; a claim for no handler would take every "
        "handler's deliveries");
  // Fails fast: a store that cannot be reached or is not set up is the caller's to report,
  // before any thread runs. The instance becomes the claim thread's.
  std::unique_ptr<Store> claim_store = named_stores_();
  claim_store->check_worker(worker_, names_, config_.lease);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (started_) return;
    started_ = true;
  }
  const int threads =
      config_.handler_threads > 0 ? config_.handler_threads : std::max(1, config_.concurrency);
  pool_.start(threads);
  settle_thread_ = std::thread([this] { batcher_.run(named_stores_, config_.poll_interval); });
  renewer_.start();
  claims_.start(std::move(claim_store));
}

DispatcherCounters Dispatcher::counters() const {
  const auto claimed = claims_.counters();
  const auto handled = pool_.counters();
  DispatcherCounters c;
  c.claims = claimed.claims;
  c.claimed = claimed.claimed;
  c.wakeups = claimed.wakeups;
  c.succeeded = handled.succeeded;
  c.failed = handled.failed;
  c.lost = handled.lost;
  c.buried = handled.buried;
  std::lock_guard<std::mutex> lock(mutex_);
  c.released = released_;
  return c;
}

std::size_t Dispatcher::in_flight() const {
  return claims_.in_flight();
}

// Gives deliveries back on the claim connection, without charging an attempt.
void Dispatcher::release(const std::vector<std::string>& tokens) {
  if (tokens.empty()) return;
  for (const auto& token : tokens) {
    try {
      if (claims_.store()) claims_.store()->release(token);
    } catch (const std::exception& e) {
      log_(std::string("release failed: ") + e.what());
    }
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    released_ += tokens.size();
  }
  claims_.settled(tokens.size());
}

void Dispatcher::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!started_ || stopped_) return;
    stopped_ = true;
  }
  claims_.stop();

  // 1. Deliveries claimed but not started go back at once.
  std::vector<std::string> unstarted;
  for (auto& d : pool_.take_queued()) unstarted.push_back(std::move(d.token));
  release(unstarted);

  // 2. Running handlers get the grace period; the ones still running are abandoned: their
  // deliveries are released and whatever they return later is ignored.
  const std::vector<std::string> abandoned = pool_.shutdown(config_.shutdown_grace);

  // 3. Completions of finished handlers go out before the lanes are handed back.
  batcher_.stop();
  if (settle_thread_.joinable()) settle_thread_.join();
  release(abandoned);
  renewer_.stop();

  // 4. Lanes that run nothing now are free for other workers at once, not at lease expiry.
  try {
    if (claims_.store()) claims_.store()->relinquish(worker_);
  } catch (const std::exception& e) {
    log_(std::string("relinquish failed: ") + e.what());
  }
}

}  // namespace relaybus::client

// The dispatcher's view of a relaybus store: the worker half of the SQL API, and nothing
// about how it is reached. PgStore implements it on libpq; a MongoDB store can implement
// it later, and the unit tests implement it in memory.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace relaybus::client {

// One claimed (event, handler) pair. `token` is opaque: it is passed back unchanged.
struct Delivery {
  std::string token;
  std::string event_id;
  std::string handler;
  std::string type;
  std::string key;  // empty when the event has no ordering key
  bool has_key = false;
  std::string payload;  // the payload object as JSON text
  int attempts = 0;     // attempts charged before this one
  std::string published_at;
};

// A store error. `sqlstate` is the server's SQLSTATE, or empty for a connection problem.
class StoreError : public std::runtime_error {
 public:
  StoreError(std::string sqlstate, const std::string& message)
      : std::runtime_error(message), sqlstate_(std::move(sqlstate)) {}
  const std::string& sqlstate() const { return sqlstate_; }

 private:
  std::string sqlstate_;
};

// Who claims: a worker name, and the holder of this incarnation. Lanes are bound to the
// pair, so every connection of the process holds them (a pool may close or swap
// connections), and a restarted process, with another holder, never adopts the lanes of
// its predecessor while their lease lasts.
struct Worker {
  std::string name;
  std::string holder;
};

// Not thread-safe: every thread that talks to the store uses its own instance (a libpq
// connection serves one thread at a time).
class Store {
 public:
  virtual ~Store() = default;

  // Leases lanes for `worker` and returns up to `batch` due deliveries of `handlers`.
  virtual std::vector<Delivery> claim(const Worker& worker, int batch,
                                      std::chrono::milliseconds lease,
                                      const std::vector<std::string>& handlers) = 0;
  // Deletes the deliveries whose lease is still valid; returns how many.
  virtual int complete_many(const std::vector<std::string>& tokens) = 0;
  // Charges one attempt: "retry", "dead" or "lost".
  virtual std::string fail(const std::string& token, const std::string& error) = 0;
  // Gives a delivery back without charging an attempt; false = lease lost.
  virtual bool release(const std::string& token) = 0;
  // Hands back every lane of `worker` that runs nothing; returns how many.
  virtual int relinquish(const Worker& worker) = 0;
  // Renews every lane `worker` holds; returns how many.
  virtual int extend_lease(const Worker& worker, std::chrono::milliseconds lease) = 0;
  // Subscribes this instance to publish notifications (LISTEN relaybus). Idempotent.
  virtual void listen() = 0;
  // Waits up to `timeout` for a notification; true if one arrived. Polling stays the
  // correctness path: a false return only means "look anyway".
  virtual bool wait_for_wakeup(std::chrono::milliseconds timeout) = 0;
};

// Opens a new store instance (a new connection) for a thread of the dispatcher.
using StoreFactory = std::function<std::unique_ptr<Store>()>;

}  // namespace relaybus::client

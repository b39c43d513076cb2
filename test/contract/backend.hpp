// The contract suite's view of a store implementation. A backend is one small file
// (pg_backend.cpp, memory_backend.cpp, ...) that registers a factory under a name; every
// case in *_test.cpp runs once per registered, available backend.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "store/store.hpp"

namespace relaybus::contract {

// One test's view of a store: every open() of one Backend object reaches the same bus
// (for PostgreSQL: a new connection to the same database). A Backend object is made per
// test, so a backend without persistent state can start each test from an empty bus.
class Backend {
 public:
  virtual ~Backend() = default;
  // A new store instance (a new connection): each one is used by one thread.
  virtual std::unique_ptr<store::Store> open() = 0;
  // A new store instance whose retention is zero: every dead letter and every event
  // without deliveries has expired for its purge_expired().
  virtual std::unique_ptr<store::Store> open_expiring() = 0;
};

// How a backend is registered: `unavailable` returns why it cannot run here (for example
// a missing connection string), or an empty string; `make` is called once per test.
struct BackendInfo {
  std::string name;  // a test-name suffix: letters, digits and '_' only
  std::function<std::string()> unavailable;
  std::function<std::unique_ptr<Backend>()> make;
};

// Every registered backend, in registration order (static initialization of the backend
// files; read only once main has started).
std::vector<BackendInfo>& backends();
const BackendInfo& backend_named(const std::string& name);

// Registers a backend from a namespace-scope object in its file.
struct RegisterBackend {
  explicit RegisterBackend(BackendInfo info);
};

// A name that no other test, no repetition of this one (--gtest_repeat) and no earlier or
// concurrent run against the same database uses: "c<run id>.<test serial>-<test>-<stem>".
// Handlers, types, workers, holders, event ids and keys of a test are all made with it, so
// tests sharing a database never see each other's work.
std::string unique_name(const std::string& stem);
// Starts a new test serial for unique_name (the fixture's SetUp calls it).
void next_test();

}  // namespace relaybus::contract

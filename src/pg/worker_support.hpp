// What relaybus's background workers share: starting up like a PostgreSQL worker, one
// transaction per unit of work, and finding out whether relaybus is installed.
#pragma once

#include "spi.hpp"

namespace relaybus::pg::worker {

// Signal handlers (SIGHUP reloads, SIGTERM ends the worker at the next interrupt check),
// then the connection to relaybus.database.
void start(const char* application_name);

// Applies a pending configuration reload and ends the worker if it was asked to.
void check_signals();

// Runs body in a transaction of its own with SPI connected and a snapshot, shown in
// pg_stat_activity as `activity`. An error escapes as an exception (ending the worker).
template <typename Body>
void in_transaction(const char* activity, Body&& body);

// True when relaybus is installed in this database (the workers wait until it is).
bool extension_installed();

// Waits for the latch, the timeout or postmaster death.
void wait(int timeout_ms);

void begin_transaction(const char* activity);
void commit_transaction();

template <typename Body>
void in_transaction(const char* activity, Body&& body) {
  begin_transaction(activity);
  body();
  commit_transaction();
}

}  // namespace relaybus::pg::worker

// The dispatcher's claim thread: claims up to the free capacity, and when a claim comes back
// empty waits for a notification, for the poll interval, or for some of its own deliveries
// to settle. It owns the in-flight counts, because it is the one that waits on them: the
// deliveries claimed and not yet settled, and of those the ones whose handler has returned
// (their outcome waits for the settlement connection). Capacity is the deliveries claimed
// and not returned (running, or waiting in line for a handler), up to the larger of
// concurrency and batch_size: a delivery whose handler returned no longer takes a place
// while its completion waits for the completion window and the statement, which would cap
// a worker at concurrency / (window + round trip) deliveries a second whatever its handlers
// cost. What it holds is bounded apart: at most capacity + max_unsettled deliveries in
// flight, so that a settlement connection falling behind holds
// the claims back. Whoever ends an attempt
// reports it: returned() when a handler's outcome goes to the settlement connection,
// settled() when an attempt has ended.
//
// Every role may NOTIFY any channel, so a notification is only a hint and may come from
// anyone who can connect: a claim it causes starts no sooner than wakeup_interval after
// the previous claim began. A notification heard sooner is not dropped: the claim waits
// out the spacing. Every claim takes the notifications heard before it begins, since it
// answers them: however many arrived, they count as one, and none piles up unread while
// the worker is busy.
//
// A claim names every handler the worker runs, and the store refuses the whole claim when
// one of them is not subscribed (unsubscribed while the worker runs, or a name the start-up
// check did not see). So one bad name would starve every other handler: the loop leaves
// that handler out of its claims, says so once (not at each try), and tries it again every
// recheck_unsubscribed. It never claims with no handler at all, which would mean every one.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "seam.hpp"

namespace relaybus::client {

class ClaimLoop {
 public:
  struct Options {
    int batch_size = 10;   // most deliveries one claim asks for
    int concurrency = 10;  // with batch_size, most deliveries claimed and not yet returned
    // Deliveries in flight (unreturned, or returned and not yet settled) beyond capacity.
    std::size_t max_unsettled = 1000;
    std::chrono::milliseconds poll_interval{1000};
    std::chrono::microseconds wakeup_interval{1000};  // least spacing of woken claims
    std::chrono::milliseconds lease{30000};
    bool listen = true;
    // How long a handler found unsubscribed is left out of the claims before it is tried again.
    std::chrono::milliseconds recheck_unsubscribed{30000};
  };
  struct Counters {
    std::size_t claims = 0;   // claim statements
    std::size_t claimed = 0;  // deliveries received
    std::size_t wakeups = 0;  // notifications that ended a poll wait
  };
  // Receives each claim's deliveries, on the claim thread, after they count as in flight.
  using Deliver = std::function<void(std::vector<Delivery>)>;
  using LogFn = std::function<void(const std::string&)>;

  ClaimLoop(StoreFactory stores, Worker worker, std::vector<std::string> handlers, Options options,
            Deliver deliver, LogFn log);
  ~ClaimLoop();  // stop()
  ClaimLoop(const ClaimLoop&) = delete;
  ClaimLoop& operator=(const ClaimLoop&) = delete;

  // `store`: an instance opened already (the dispatcher's start-up check), used as the claim
  // thread's; nullptr: the thread opens one.
  void start(std::unique_ptr<Store> store = nullptr);
  // Stops claiming and joins the thread. Idempotent.
  void stop();
  // n handlers have returned and their outcomes were handed to the settlement connection:
  // they no longer count against capacity, only as in flight until settled_returned().
  void returned(std::size_t n);
  // n attempts reported through returned() have ended (completed, failed, buried, or given
  // up on).
  void settled_returned(std::size_t n);
  // n attempts that were never reported through returned() have ended (a transactional
  // handler's, committed or rolled back in its own transaction; released).
  void settled(std::size_t n);
  // Claimed and not yet settled, returned or not.
  std::size_t in_flight() const;
  // When the last claim began that renewed every lane the worker holds (a claim that
  // returned, naming every handler, on a store whose claims renew held lanes); the epoch of
  // steady_clock if none has. Any thread.
  std::chrono::steady_clock::time_point lanes_renewed_at() const;
  Counters counters() const;
  // The claim thread's store, for releases and the relinquish once stop() returned; nullptr
  // if it never connected.
  Store* store() const { return store_.get(); }

 private:
  void run();
  bool wait_for_work();       // sleeps out the poll interval; false when stopping
  bool space_out_wakeup();    // waits until a woken claim may start; false when stopping
  void take_notifications();  // those heard before a claim: it answers them
  // The handlers to claim for now: handlers_ without those left out, and those whose
  // recheck time has come back in.
  std::vector<std::string> claimable();
  // After a claim failed: leaves out the handler the error names as not subscribed; false
  // when it names none of them.
  bool leave_out_unsubscribed(const std::string& error, const std::vector<std::string>& asked);

  const StoreFactory stores_;
  const Worker worker_;
  const std::vector<std::string> handlers_;
  const Options options_;
  const Deliver deliver_;
  const LogFn log_;
  std::unique_ptr<Store> store_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;  // in-flight count or stopping changed
  std::size_t in_flight_ = 0;        // claimed, not yet settled
  std::size_t returned_ = 0;         // of those, handlers that returned (waiting for settlement)
  bool stopping_ = false;
  Counters counters_;
  std::chrono::steady_clock::time_point last_claim_;  // claim thread only
  // lanes_renewed_at(), in steady_clock ticks.
  std::atomic<std::chrono::steady_clock::rep> lanes_renewed_at_{0};
  // Claim thread only: handlers left out (not subscribed), with when to try each again; and
  // those being tried again, to say so once a claim with them works.
  std::map<std::string, std::chrono::steady_clock::time_point> left_out_;
  std::vector<std::string> retrying_;
  std::set<std::string> reported_;  // left out and logged: logged again only once back
  std::thread thread_;
};

}  // namespace relaybus::client

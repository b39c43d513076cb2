// Workers claiming at the same time: a delivery is never held by two live leases at once,
// every delivery completes once, and per key the deliveries run in publish order. Against
// the conditional-writes store this is where claims really race for lanes.
#include "contract/contract.hpp"

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <thread>

namespace relaybus::contract {
namespace {

TEST_P(Contract, ConcurrentWorkersNeverShareADeliveryAndKeepKeyOrder) {
  constexpr int kEvents = 200;
  constexpr int kWorkers = 4;
  auto admin = open();
  const std::string type = unique_name("type");
  const std::string h = subscribe(*admin, "h", {type});
  std::vector<Event> events;
  const std::string prefix = unique_name("e");
  for (int i = 0; i < kEvents; ++i) {
    // Every other event keyed, over 10 keys: 10 events per key, in publish order.
    std::optional<std::string> key;
    if (i % 2 == 0) key = prefix + "-k" + std::to_string(i % 20);
    events.push_back(event(type, prefix + "-" + std::to_string(i), key));
  }
  admin->publish_batch(events);

  std::mutex mutex;
  std::set<std::string> held;                   // claimed and not yet completed
  std::map<std::string, std::vector<int>> ran;  // per key, the event numbers in run order
  std::vector<std::string> shared;              // claimed while another lease held it
  std::atomic<int> completed{0};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      auto s = open();
      const Worker me = worker("w" + std::to_string(w));
      while (completed < kEvents && std::chrono::steady_clock::now() < deadline) {
        const auto got = claim(*s, me, {h}, 7);
        if (got.empty()) {
          std::this_thread::sleep_for(2ms);
          continue;
        }
        std::vector<std::string> tokens;
        {
          std::lock_guard<std::mutex> lock(mutex);
          for (const auto& d : got) {
            if (!held.insert(d.event_id).second) shared.push_back(d.event_id);
            // Recorded while the lease is held: the next of its key cannot run before.
            if (d.has_key)
              ran[d.key].push_back(std::stoi(d.event_id.substr(d.event_id.rfind('-') + 1)));
            tokens.push_back(d.token);
          }
        }
        const int done = s->complete_many(tokens);
        {
          std::lock_guard<std::mutex> lock(mutex);
          for (const auto& d : got) held.erase(d.event_id);
        }
        EXPECT_EQ(done, static_cast<int>(tokens.size())) << "a live lease's completion was lost";
        completed += done;
      }
    });
  }
  for (auto& t : workers) t.join();

  EXPECT_TRUE(shared.empty()) << shared.size() << " deliveries held by two leases at once, "
                              << (shared.empty() ? "" : shared.front());
  EXPECT_EQ(completed.load(), kEvents);
  EXPECT_EQ(ran.size(), 10u);
  for (const auto& [key, order] : ran) {
    EXPECT_EQ(order.size(), 10u) << key;
    EXPECT_TRUE(std::is_sorted(order.begin(), order.end())) << key << " ran out of order";
  }
  for (int i = 0; i < kEvents; i += 37)
    EXPECT_EQ(admin->lookup(prefix + "-" + std::to_string(i), h), std::nullopt);
}

// One incarnation on two connections, claiming and failing at the same time: an attempt
// that ends while the same worker's next claim is in progress is not written back into
// the lane's in-flight list by that claim (where it would sit, pending and listed, and
// never run again while the worker kept the lane). Every delivery completes.
TEST_P(Contract, AnAttemptEndingDuringItsWorkersNextClaimIsNotStranded) {
  constexpr int kEvents = 120;
  auto admin = open();
  const std::string type = unique_name("type");
  const std::string h = subscribe(*admin, "h", {type});
  std::vector<Event> events;
  const std::string prefix = unique_name("e");
  // All in one lane, so every claim and every fail meet on the same lane document.
  for (const auto& id : ids_in_lane(prefix, core::lane_of(prefix), kEvents))
    events.push_back(event(type, id));
  admin->publish_batch(events);
  const Worker me = worker("pool");

  std::atomic<int> completed{0};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::vector<std::thread> connections;
  for (int c = 0; c < 2; ++c) {
    connections.emplace_back([&, c] {
      auto s = open();
      int round = 0;
      while (completed < kEvents && std::chrono::steady_clock::now() < deadline) {
        const auto got = claim(*s, me, {h}, 5);
        if (got.empty()) {
          std::this_thread::sleep_for(1ms);
          continue;
        }
        // Every other round fails its first delivery (due again at once), so attempt
        // ends keep racing the other connection's claims.
        std::vector<std::string> done;
        for (std::size_t i = 0; i < got.size(); ++i) {
          if (i == 0 && (round + c) % 2 == 0 && got[i].attempts < 3) {
            s->fail(got[i].token, "again", 0ms);
          } else {
            done.push_back(got[i].token);
          }
        }
        ++round;
        if (!done.empty()) completed += s->complete_many(done);
      }
    });
  }
  for (auto& t : connections) t.join();
  EXPECT_EQ(completed.load(), kEvents) << "deliveries were stranded in the lane";
}

}  // namespace
}  // namespace relaybus::contract

// relaybus: the operator and benchmark command-line tool.
#include <cstdio>
#include <iostream>
#include <string>

#include "client/seam.hpp"
#include "commands.hpp"
#include "store_uri.hpp"

namespace {

const char* kUsage = R"(usage:
  relaybus setup --db CONN
  relaybus subscribe --db CONN --handler H --types T1,T2 [--max-attempts N]
  relaybus unsubscribe --db CONN --handler H
  relaybus stats --db CONN
  relaybus dead list --db CONN [--handler H] [--limit N]
  relaybus dead requeue --db CONN [--handler H]
  relaybus maintain --db CONN [--every-s S]
  relaybus bench drain --db CONN --out PREFIX [--handler bench] [--dispatchers P]
        [--concurrency C] [--batch B] [--poll-ms MS] [--lease-ms MS] [--window-us US]
        [--listen true|false] [--duration-s S]
  relaybus bench publish --db CONN --out PREFIX [--publishers P] [--batch B] [--events N]
        [--keys K] [--type T]
  relaybus bench mixed --db CONN --out PREFIX [--rate R] [--duration-s S] [--publishers P]
        [--dispatchers D] [--concurrency C] [--batch B] [--poll-ms MS] [--drain-timeout-s S]
CONN is a libpq connection string or URI, or a mongodb:// URI for the MongoDB store
(its path names the database, "relaybus" when it has none; a replica set is needed).
maintain takes over expired lanes and purges what the retention expired, once or every
S seconds until stopped: the PostgreSQL extension's background worker does this itself.
)";

}  // namespace

int main(int argc, char** argv) {
  using namespace relaybus::cli;
  std::string db;  // for the label of a store's own error code
  try {
    Args args(argc, argv, 1);
    db = args.str("db", "");
    const auto& words = args.positional();
    const std::string command = words.empty() ? "" : words[0];
    const std::string sub = words.size() > 1 ? words[1] : "";
    if (command == "setup") return setup_command(args);
    if (command == "subscribe") return subscribe_command(args);
    if (command == "unsubscribe") return unsubscribe_command(args);
    if (command == "stats") return stats_command(args);
    if (command == "maintain") return maintain_command(args);
    if (command == "dead") return dead_command(args);
    if (command == "bench" && sub == "drain") return bench_drain_command(args);
    if (command == "bench" && sub == "publish") return bench_publish_command(args);
    if (command == "bench" && sub == "mixed") return bench_mixed_command(args);
    std::fputs(kUsage, command == "help" || args.has("help") ? stdout : stderr);
    return command == "help" || args.has("help") ? 0 : 2;
  } catch (const UsageError& e) {
    std::cerr << "relaybus: " << e.what() << "\n" << kUsage;
    return 2;
  } catch (const relaybus::client::StoreError& e) {
    std::cerr << "relaybus: " << e.what();
    if (!e.native_code().empty())
      std::cerr << " (" << (is_mongodb_uri(db) ? "code " : "SQLSTATE ") << e.native_code() << ")";
    std::cerr << std::endl;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "relaybus: " << e.what() << std::endl;
    return 1;
  }
}

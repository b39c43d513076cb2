// Operator commands: relaybus stats, relaybus dead list, relaybus dead requeue.
#include <cstdio>

#include "args.hpp"
#include "commands.hpp"
#include "connection.hpp"

namespace relaybus::cli {

int stats_command(const Args& args) {
  Connection db(args.required("db"));
  print_table(
      db.query("SELECT handler, pending, processing, dead, completed, oldest_pending "
               "FROM relaybus.statistics() ORDER BY handler"));
  return 0;
}

int dead_command(const Args& args) {
  const auto& words = args.positional();
  const std::string action = words.size() > 1 ? words[1] : "";
  Connection db(args.required("db"));
  std::optional<std::string> handler;
  if (args.has("handler")) handler = args.str("handler", "");
  if (action == "list") {
    print_table(
        db.query("SELECT event_id, handler, type, key, attempts, updated_at, last_error "
                 "FROM relaybus.list_deliveries('dead', $1, $2::int)",
                 {handler, std::to_string(args.integer("limit", 100))}));
    return 0;
  }
  if (action == "requeue") {
    std::printf("requeued %s\n", db.scalar("SELECT relaybus.requeue_dead($1)", {handler}).c_str());
    return 0;
  }
  throw UsageError("usage: relaybus dead list|requeue --db CONN [--handler H] [--limit N]");
}

}  // namespace relaybus::cli

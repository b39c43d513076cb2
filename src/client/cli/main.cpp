// relaybus: the operator tool. Its command line: the commands, their options with their
// defaults (declared once, here), and how errors are reported: a usage error exits 2
// (src/client/tool/command_line.hpp), any other error 1, with what to do where the tool
// knows it (GuidedError).
#include <iostream>

#include "client/tool/command_line.hpp"
#include "client/tool/store_uri.hpp"
#include "commands.hpp"
#include "core/retry_policy.hpp"
#include "guided_error.hpp"
#include "store/store.hpp"

#ifndef RELAYBUS_VERSION
#error "RELAYBUS_VERSION (relaybus.control's default_version) comes from the Makefile"
#endif

namespace {

namespace po = boost::program_options;
using relaybus::tool::at_least;
using relaybus::tool::Command;
using relaybus::tool::Parsed;

void connection_option(po::options_description& o) {
  o.add_options()(
      "db", po::value<std::string>()->default_value("", "")->value_name("CONN"),
      "a libpq connection string or URI (\"host=/tmp dbname=app\", postgresql://...), or a "
      "mongodb:// URI; default: libpq's PG* variables (PGHOST, PGPORT, PGDATABASE, PGUSER...)");
}

void json_option(po::options_description& o) {
  o.add_options()("json", po::bool_switch(),
                  "print one JSON document instead of a table (fields: docs/cli.md)");
}

void handler_option(po::options_description& o, const char* what) {
  o.add_options()("handler", po::value<std::string>()->required()->value_name("H"), what);
}

// Errors of a command's store: what to do (GuidedError) or the store's message and code.
std::function<int(const Parsed&)> reported(int (*body)(const Parsed&)) {
  return [body](const Parsed& args) {
    try {
      return body(args);
    } catch (const relaybus::cli::GuidedError& e) {
      std::cerr << "relaybus: " << e.what() << "\n";
      if (!e.hint().empty()) std::cerr << "hint: " << e.hint() << "\n";
      std::cerr << std::flush;
      return relaybus::tool::kRuntimeError;
    } catch (const relaybus::store::StoreError& e) {
      std::cerr << "relaybus: " << relaybus::tool::store_error_text(e, args.get<std::string>("db"))
                << std::endl;
      return relaybus::tool::kRuntimeError;
    }
  };
}

Command command(std::string name, std::string summary, int (*body)(const Parsed&),
                std::function<void(po::options_description&)> options = {}) {
  Command c;
  c.name = std::move(name);
  c.summary = std::move(summary);
  c.options = std::move(options);
  c.run = reported(body);
  return c;
}

relaybus::tool::Program program() {
  namespace cli = relaybus::cli;
  namespace core = relaybus::core;
  relaybus::tool::Program p;
  p.name = "relaybus";
  p.version = RELAYBUS_VERSION;
  p.summary = "operate a relaybus store: handlers, counts, dead letters, maintenance";
  p.common_options = connection_option;
  p.epilog =
      "Every command takes --db CONN; without it libpq's PG* environment variables choose\n"
      "the PostgreSQL database. A mongodb:// URI names the MongoDB store instead (its path is\n"
      "the database, \"relaybus\" when it has none; a replica set is needed). On PostgreSQL\n"
      "every command but setup needs relaybus's admin right in that database, given by\n"
      "SELECT relaybus.grant_rights('ROLE', 'admin') (on relaybus 0.2.0: relaybus_admin).\n"
      "Exit codes: 0 done, 1 the command failed (the message says why, and what to do),\n"
      "2 a bad command line. Reference: docs/cli.md.\n";
  p.moved = [](const std::string& word) -> std::string {
    if (word == "bench") return "the benchmark driver is a program of its own now, relaybus-bench";
    return "";
  };

  Command setup = command(
      "setup", "check that relaybus is installed (PostgreSQL), or create its collections (MongoDB)",
      cli::setup_command);
  setup.details =
      "On PostgreSQL it checks that relaybus is installed in the database and prints its\n"
      "version: CREATE EXTENSION relaybus creates everything. On MongoDB it creates the\n"
      "collections and indexes, and converts a 0.1.0 layout; running it again is harmless.\n";

  Command subscribe = command(
      "subscribe", "subscribe a handler to event types, or update its subscription",
      cli::subscribe_command, [](po::options_description& o) {
        handler_option(o, "the handler's name (required)");
        o.add_options()                                                           //
            ("types", po::value<std::string>()->required()->value_name("T1,T2"),  //
             "the event types it receives, comma-separated; * for every type (required)")(
                "max-attempts",
                at_least<int>("max-attempts", 1)
                    ->default_value(core::kDefaultMaxAttempts)
                    ->value_name("N"),
                "attempts before a delivery is dead-lettered (1 or more)")(
                "backoff-base-ms",
                at_least<std::int64_t>("backoff-base-ms", 0)
                    ->default_value(core::kDefaultBackoffBaseUs / 1000)
                    ->value_name("MS"),
                "the wait after the first failed attempt; it doubles with each further one")(
                "backoff-max-ms",
                at_least<std::int64_t>("backoff-max-ms", 0)
                    ->default_value(core::kDefaultBackoffMaxUs / 1000)
                    ->value_name("MS"),
                "the longest wait between attempts");
      });

  Command unsubscribe =
      command("unsubscribe", "remove a handler's subscription (its deliveries stay)",
              cli::unsubscribe_command, [](po::options_description& o) {
                handler_option(o, "the handler to unsubscribe (required)");
              });

  Command pause = command(
      "pause", "stop handing out a handler's deliveries (they are kept; see resume)",
      cli::pause_command,
      [](po::options_description& o) { handler_option(o, "the handler to pause (required)"); });
  pause.details =
      "Claims, the in-database handler workers' included, skip the handler until resume;\n"
      "publishing goes on and attempts in flight end as usual.\n";
  Command resume = command(
      "resume", "hand out a paused handler's deliveries again", cli::resume_command,
      [](po::options_description& o) { handler_option(o, "the handler to resume (required)"); });
  Command cancel = command("cancel", "remove one pending or dead delivery, never to run",
                           cli::cancel_command, [](po::options_description&) {});
  cancel.arguments = "EVENT_ID HANDLER";
  cancel.max_arguments = 2;
  cancel.details =
      "Fails (exit 1) when there is no such delivery, and while it is in flight: cancel it\n"
      "once its attempt has ended. A later delivery of its key no longer waits for it.\n";

  Command stats = command("stats", "per handler: pending, processing, dead, completed, paused",
                          cli::stats_command, json_option);
  stats.details =
      "pending: waiting deliveries (due or not); processing: in a held lane's in-flight list;\n"
      "dead: dead letters; completed: completion history (0 while it is off);\n"
      "oldest_pending: when the oldest pending delivery was published (UTC);\n"
      "paused: yes while relaybus pause holds it.\n";

  Command dead_list = command(
      "dead list", "list dead letters, newest first", cli::dead_list_command,
      [](po::options_description& o) {
        o.add_options()                                                                    //
            ("handler", po::value<std::string>()->value_name("H"), "only this handler's")  //
            ("limit", at_least<int>("limit", 0)->default_value(100)->value_name("N"),
             "at most N dead letters (0 or more)");
        json_option(o);
      });

  Command dead_requeue =
      command("dead requeue", "move dead letters back to pending, with a fresh attempt budget",
              cli::dead_requeue_command, [](po::options_description& o) {
                o.add_options()("handler", po::value<std::string>()->value_name("H"),
                                "without EVENT_ID HANDLER: only this handler's dead letters");
                json_option(o);
              });
  dead_requeue.arguments = "[EVENT_ID HANDLER]";
  dead_requeue.max_arguments = 2;
  dead_requeue.details =
      "With EVENT_ID HANDLER it requeues that one delivery, and fails (exit 1) when it is\n"
      "not a dead letter. Without them it requeues every dead letter, of --handler only\n"
      "when given, and prints how many. A requeued keyed delivery keeps its place in its\n"
      "key's order.\n";

  Command maintain = command(
      "maintain", "take over expired lanes and purge what retention expired", cli::maintain_command,
      [](po::options_description& o) {
        o.add_options()("every-s",
                        at_least<double>("every-s", 0)->default_value(0, "0")->value_name("S"),
                        "repeat every S seconds until SIGTERM or SIGINT (0: once)");
      });
  maintain.details =
      "The PostgreSQL extension's background worker does this by itself when relaybus is\n"
      "preloaded; run it for a database without the preload, or for the MongoDB store.\n";

  p.commands = {setup, subscribe, unsubscribe,  pause,  resume,
                stats, dead_list, dead_requeue, cancel, maintain};
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return relaybus::tool::run_program(program(), argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "relaybus: " << e.what() << std::endl;
    return relaybus::tool::kRuntimeError;
  }
}

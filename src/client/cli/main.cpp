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

// The options every command takes, before or after the command's name.
void common_options(po::options_description& o) {
  o.add_options()(
      "db", po::value<std::string>()->default_value("", "")->value_name("CONN"),
      "a libpq connection string or URI (\"host=/tmp dbname=app\", postgresql://...), or a "
      "mongodb:// URI; default: libpq's PG* variables (PGHOST, PGPORT, PGDATABASE, PGUSER...)")(
      "verbose", po::bool_switch(),
      "on an error from the server, show all of it: where in relaybus's SQL functions it was "
      "raised (CONTEXT)");
}

void json_option(po::options_description& o) {
  o.add_options()("json", po::bool_switch(),
                  "print one JSON document instead of a table, with the same fields");
}

// A server error as the tool reports it: the message with its code (SQLSTATE), then the
// server's detail and hint on lines of their own. Where in relaybus's SQL functions it was
// raised (PL/pgSQL's CONTEXT lines, naming internal functions) helps whoever debugs relaybus,
// not an operator: only with --verbose.
std::string server_error_text(const relaybus::store::StoreError& e, const std::string& db,
                              bool verbose) {
  std::string text = e.what();
  if (text.rfind("ERROR:  ", 0) == 0) text.erase(0, 8);
  std::string first = text.substr(0, text.find('\n'));
  std::string rest = first.size() < text.size() ? text.substr(first.size() + 1) : "";
  const bool mongo = relaybus::tool::is_mongodb_uri(db);
  if (!e.native_code().empty())
    first += std::string(" (") + (mongo ? "code " : "SQLSTATE ") + e.native_code() + ")";
  std::string out = first;
  std::string line;
  bool context = false;
  for (std::size_t at = 0; at < rest.size();) {
    const std::size_t end = rest.find('\n', at);
    line = rest.substr(at, end == std::string::npos ? std::string::npos : end - at);
    at = end == std::string::npos ? rest.size() : end + 1;
    if (line.rfind("CONTEXT:", 0) == 0) context = true;
    if (context && !verbose) continue;
    for (const char* label : {"DETAIL:  ", "HINT:  "})
      if (line.rfind(label, 0) == 0) {
        std::string lower(label, std::string(label).find(':'));
        for (char& c : lower) c = static_cast<char>(c - 'A' + 'a');
        line = lower + ": " + line.substr(std::string(label).size());
      }
    out += "\n" + line;
  }
  return out;
}

void handler_option(po::options_description& o, const char* what) {
  o.add_options()("handler", po::value<std::string>()->required()->value_name("H"), what);
}

// The handler of unsubscribe, pause and resume: the argument HANDLER, or --handler.
Command one_handler_command(Command c, const char* what) {
  c.arguments = "HANDLER";
  c.max_arguments = 1;
  c.options = [what](po::options_description& o) {
    o.add_options()("handler", po::value<std::string>()->value_name("H"), what);
  };
  return c;
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
      std::cerr << "relaybus: "
                << server_error_text(e, args.get<std::string>("db"), args.get<bool>("verbose"))
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
  p.common_options = common_options;
  p.epilog =
      "Every command takes --db CONN, before or after the command's name; without it libpq's\n"
      "PG* environment variables choose the PostgreSQL database. A mongodb:// URI names the\n"
      "MongoDB store instead (its path is the database, \"relaybus\" when it has none; a\n"
      "replica set is needed). On PostgreSQL every command but setup needs relaybus's admin\n"
      "right in that database, given by SELECT relaybus.grant_rights('ROLE', 'admin') (on\n"
      "relaybus 0.2.0: relaybus_admin). --verbose shows a server error whole.\n"
      "Exit codes: 0 done, 1 the command failed (the message says why, and what to do),\n"
      "2 a bad command line. Each command's --help has its options; man relaybus has them\n"
      "all.\n";
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

  Command unsubscribe = one_handler_command(
      command("unsubscribe", "remove a handler's subscription (its deliveries stay)",
              cli::unsubscribe_command),
      "the handler, as HANDLER gives it");

  Command pause = one_handler_command(
      command("pause", "stop handing out a handler's deliveries (they are kept; see resume)",
              cli::pause_command),
      "the handler, as HANDLER gives it");
  pause.details =
      "Claims, the in-database handler workers' included, skip the handler until resume;\n"
      "publishing goes on and attempts in flight end as usual.\n";
  Command resume = one_handler_command(
      command("resume", "hand out a paused handler's deliveries again", cli::resume_command),
      "the handler, as HANDLER gives it");
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
      "dead: dead letters; completed: the completion history's count, \"not recorded\" while\n"
      "relaybus.completion_history is off (the default); oldest_pending_age: how long the\n"
      "oldest pending delivery has waited; paused: yes while relaybus pause holds it.\n"
      "Then, on PostgreSQL with relaybus 0.3.0, the event types stored for no handler (no\n"
      "subscription matches them: a misspelled type?) with how many events.\n"
      "--json: {\"handlers\": [{handler, pending, processing, dead, completed,\n"
      "completed_recorded, oldest_pending (UTC time or null), oldest_pending_age_s, paused}],\n"
      "\"unrouted\": [{type, events}] (where the store counts them)}.\n";

  Command list = command(
      "list", "list deliveries waiting (pending, delayed) and in flight, with their ages",
      cli::list_command, [](po::options_description& o) {
        o.add_options()                                                                    //
            ("handler", po::value<std::string>()->value_name("H"), "only this handler's")  //
            ("state", po::value<std::string>()->value_name("S"),
             "only pending (due now), delayed (due later) or in-flight ones")(
                "limit", at_least<int>("limit", 0)->default_value(100)->value_name("N"),
                "at most N deliveries (0 or more)");
        json_option(o);
      });
  list.details =
      "By handler, the longest waiting first: age is the time since the delivery was\n"
      "published (by this machine's clock), due when a pending one may run, worker the one\n"
      "running an in-flight one. Dead letters: relaybus dead list. The newest N of each\n"
      "state are read.\n"
      "--json: {\"deliveries\": [{event_id, handler, type, key, state (pending, delayed,\n"
      "in_flight), attempts, created_at, age_s, available_at, worker, last_error}]}.\n";

  Command show = command("show", "show one event: its payload, and each delivery's state",
                         cli::show_command, json_option);
  show.arguments = "EVENT_ID [HANDLER]";
  show.max_arguments = 2;
  show.details =
      "Shows the event (type, key, payload, headers, when it was published) and, for each\n"
      "of its handlers (or HANDLER alone), the delivery: pending, delayed, in flight, dead,\n"
      "or completed; its attempts, last error, worker and last change. PostgreSQL only.\n"
      "--json: {\"event\": {id, type, key, payload, headers, published_at} or null,\n"
      "\"deliveries\": [{handler, state, attempts, available_at, updated_at, worker,\n"
      "last_error}]}.\n";

  Command counters =
      command("counters", "what relaybus did in this database: published, claimed, completed...",
              cli::counters_command, json_option);
  counters.details =
      "relaybus.counters(): cumulative counts since the server started or the last\n"
      "relaybus.reset_counters(); kept only when relaybus is in shared_preload_libraries.\n"
      "PostgreSQL only. --json: {\"since\": UTC time, \"counters\": {name: value}}.\n";

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
        // maintain_command refuses 0 and less (a notifier here would do the same, but GCC 12
        // warns about boost::function holding a lambda that captures nothing).
        o.add_options()("every-s", po::value<double>()->value_name("S"),
                        "repeat every S seconds (more than 0) until SIGTERM or SIGINT; without "
                        "it, run once");
      });
  maintain.details =
      "The PostgreSQL extension's background worker does this by itself when relaybus is\n"
      "preloaded; run it for a database without the preload, or for the MongoDB store.\n";

  p.commands = {setup, subscribe, unsubscribe, pause,        resume, stats,   list,
                show,  counters,  dead_list,   dead_requeue, cancel, maintain};
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

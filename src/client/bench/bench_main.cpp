// relaybus-bench: the benchmark driver bench/harness.py runs (drain, publish, mixed), a
// program apart from the operator tool so that operators get no benchmark commands and the
// harness no operator ones. Its command line: the options of each scenario, with their
// defaults, declared once here.
#include <iostream>

#include "bench_commands.hpp"
#include "client/dispatcher.hpp"
#include "client/tool/command_line.hpp"
#include "client/tool/store_uri.hpp"
#include "store/store.hpp"

#ifndef RELAYBUS_VERSION
#error "RELAYBUS_VERSION (relaybus.control's default_version) comes from the Makefile"
#endif

namespace {

namespace po = boost::program_options;
using relaybus::tool::at_least;

void connection_options(po::options_description& o) {
  o.add_options()(
      "db", po::value<std::string>()->default_value("", "")->value_name("CONN"),
      "a libpq connection string or URI, or a mongodb:// URI; default: libpq's PG* "
      "variables (PGHOST, PGPORT, PGDATABASE, PGUSER...)");
}

void out_option(po::options_description& o) {
  o.add_options()("out", po::value<std::string>()->required()->value_name("PREFIX"),
                  "where the records go (required): PREFIX.summary.json, "
                  "PREFIX.dispatcher-N.tsv, PREFIX.publisher-N.tsv");
}

void dispatcher_options(po::options_description& o) {
  const relaybus::client::DispatcherConfig runtime;  // its defaults are the bench's
  o.add_options()                                                                     //
      ("handler", po::value<std::string>()->default_value("bench")->value_name("H"),  //
       "the handler the dispatchers run")
      ("dispatchers", at_least<int>("dispatchers", 1)->default_value(1)->value_name("P"),
       "dispatcher processes")
      ("concurrency",
       at_least<int>("concurrency", 1)->default_value(runtime.concurrency)->value_name("C"),
       "handlers running at once in each dispatcher")
      ("handler-threads", at_least<int>("handler-threads", 0)->default_value(0)->value_name("T"),
       "threads running handlers in each dispatcher; 0 = one per --concurrency")
      ("batch", at_least<int>("batch", 1)->default_value(runtime.batch_size)->value_name("B"),
       "most deliveries per claim")
      ("poll-ms", at_least<int>("poll-ms", 1)->default_value(1000)->value_name("MS"),
       "the claim loop's poll interval")
      ("lease-ms", at_least<int>("lease-ms", 1)->default_value(30000)->value_name("MS"),
       "the lease of a claim")
      ("window-us", at_least<int>("window-us", 0)->default_value(1000)->value_name("US"),
       "how long completions wait to be grouped into one complete_many")
      ("wakeup-us", at_least<int>("wakeup-us", 0)->default_value(1000)->value_name("US"),
       "least time from one claim to the next that a notification causes")
      ("listen", po::value<bool>()->default_value(true, "true")->value_name("true|false"),
       "wake up on publish notifications")
      ("worker-prefix", po::value<std::string>()->default_value("bench")->value_name("NAME"),
       "the dispatchers' worker names start with this");
}

void keys_option(po::options_description& o) {
  o.add_options()("keys", at_least<int>("keys", 1)->default_value(100)->value_name("K"),
                  "every other event is keyed, over K keys per publisher");
}

// A command whose store errors are reported with the store's own code (SQLSTATE, or
// MongoDB's code), which only the command's --db tells apart.
std::function<int(const relaybus::tool::Parsed&)> reporting(int (*body)(const relaybus::tool::Parsed&)) {
  return [body](const relaybus::tool::Parsed& args) {
    try {
      return body(args);
    } catch (const relaybus::store::StoreError& e) {
      std::cerr << "relaybus-bench: "
                << relaybus::tool::store_error_text(e, args.get<std::string>("db")) << std::endl;
      return relaybus::tool::kRuntimeError;
    }
  };
}

relaybus::tool::Program program() {
  using relaybus::tool::Command;
  relaybus::tool::Program p;
  p.name = "relaybus-bench";
  p.version = RELAYBUS_VERSION;
  p.summary = "the benchmark driver of relaybus's harness (bench/run)";
  p.common_options = connection_options;
  p.epilog =
      "Each command starts its publishers and dispatchers as processes of their own and\n"
      "writes what they did to files under --out, which bench/harness.py validates and\n"
      "measures. Progress goes to stderr. See bench/harness.py and docs/performance.md.\n";
  Command drain;
  drain.name = "drain";
  drain.summary = "drain the deliveries already published with dispatcher processes";
  drain.options = [](po::options_description& o) {
    out_option(o);
    dispatcher_options(o);
    o.add_options()("duration-s", at_least<double>("duration-s", 0)->default_value(600)->value_name("S"),
                    "give up after S seconds");
  };
  drain.run = reporting(relaybus::bench::drain_command);
  Command publish;
  publish.name = "publish";
  publish.summary = "publish events from publisher processes as fast as they go";
  publish.options = [](po::options_description& o) {
    out_option(o);
    o.add_options()                                                                          //
        ("publishers", at_least<int>("publishers", 1)->default_value(1)->value_name("P"),  //
         "publisher processes")
        ("batch", at_least<int>("batch", 1)->default_value(1)->value_name("B"),
         "events per call: 1 calls publish, more publish_batch")
        ("events", at_least<long long>("events", 0)->default_value(10000)->value_name("N"),
         "events in all, shared out over the publishers")
        ("type", po::value<std::string>()->default_value("bench.event")->value_name("T"),
         "the event type");
    keys_option(o);
  };
  publish.run = reporting(relaybus::bench::publish_command);
  Command mixed;
  mixed.name = "mixed";
  mixed.summary = "publish at an offered rate while dispatchers run, then drain";
  mixed.options = [](po::options_description& o) {
    out_option(o);
    o.add_options()                                                                      //
        ("rate", at_least<double>("rate", 1)->default_value(1000)->value_name("R"),  //
         "events per second offered, over all publishers")
        ("duration-s", at_least<double>("duration-s", 0)->default_value(20)->value_name("S"),
         "how long to publish")
        ("drain-timeout-s",
         at_least<double>("drain-timeout-s", 0)->default_value(120)->value_name("S"),
         "how long to wait for the backlog to drain afterwards")
        ("publishers", at_least<int>("publishers", 1)->default_value(2)->value_name("P"),
         "publisher processes");
    keys_option(o);
    dispatcher_options(o);
  };
  mixed.run = reporting(relaybus::bench::mixed_command);
  p.commands = {drain, publish, mixed};
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return relaybus::tool::run_program(program(), argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "relaybus-bench: " << e.what() << std::endl;
    return relaybus::tool::kRuntimeError;
  }
}

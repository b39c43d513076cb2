// The command-line shape both relaybus programs share (bin/relaybus, bin/relaybus-bench):
//   PROGRAM [COMMON OPTIONS] COMMAND [SUBCOMMAND] [ARGUMENTS] [OPTIONS]
//   PROGRAM --help | --version,  PROGRAM COMMAND --help,  PROGRAM help [COMMAND]
// parsed with Boost.Program_options. A command declares its options and positional
// arguments; everything else on the line (an unknown option, a stray word, a value of the
// wrong type, a missing required option) is a usage error: one line on stderr naming it and
// pointing at the command's --help, exit code 2. Options are never abbreviated (--hand is
// not --handler): a script that works today must not change meaning when an option is added.
#pragma once

#include <functional>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

namespace relaybus::tool {

namespace po = boost::program_options;

// Exit codes: a runtime error (the store refused, a connection failed) and a bad command
// line.
inline constexpr int kRuntimeError = 1;
inline constexpr int kUsageError = 2;

// A bad command line found after parsing (a combination of options the parser cannot
// express). run_program() reports it like the parser's own errors: exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What a command's body gets: its options and its positional arguments.
class Parsed {
 public:
  Parsed(po::variables_map options, std::vector<std::string> arguments)
      : options_(std::move(options)), arguments_(std::move(arguments)) {}

  bool has(const std::string& name) const { return options_.count(name) > 0; }
  // A bool_switch, or a value with a default: always there.
  template <typename T>
  T get(const std::string& name) const {
    return options_[name].as<T>();
  }
  template <typename T>
  std::optional<T> optional(const std::string& name) const {
    if (!has(name)) return std::nullopt;
    return options_[name].as<T>();
  }
  const std::vector<std::string>& arguments() const { return arguments_; }

 private:
  po::variables_map options_;
  std::vector<std::string> arguments_;
};

// A numeric option's value type with a lower bound, checked while parsing (a usage error):
//   ("batch", tool::at_least<int>("batch", 1)->default_value(10)->value_name("N"), "...")
template <typename T>
po::typed_value<T>* at_least(const std::string& option, T low) {
  return po::value<T>()->notifier([option, low](const T& value) {
    if (value < low) {
      std::ostringstream message;
      message << "--" << option << " must be at least " << low << ", not " << value;
      throw po::error(message.str());
    }
  });
}

struct Command {
  std::string name;       // its words: "stats", "dead requeue"
  std::string arguments;  // the synopsis of its positional arguments, "[EVENT_ID HANDLER]"
  std::size_t max_arguments = 0;
  std::string summary;  // one line, for PROGRAM --help
  std::string details;  // shown by COMMAND --help after the options; may be empty
  // Adds the command's own options (the program's common ones and --help come on top).
  std::function<void(po::options_description&)> options;
  // Returns the exit code. Throws UsageError for a bad combination of arguments.
  std::function<int(const Parsed&)> run;
};

struct Program {
  std::string name;     // "relaybus"
  std::string version;  // printed by --version as "NAME VERSION"
  std::string summary;  // the first line of --help
  std::string epilog;   // the end of PROGRAM --help
  std::vector<Command> commands;
  // Options every command takes (--db), listed in each command's --help.
  std::function<void(po::options_description&)> common_options;
  // A word that used to be a command: the note an "unknown command" error adds.
  std::function<std::string(const std::string& word)> moved;
};

// Parses argv and runs the command it names. Usage errors are reported here (exit code 2);
// errors the command throws otherwise are left to the caller, which knows how to explain
// them. Afterwards stdout is flushed: when what was printed could not be written (a full
// disk, a closed pipe) it says so on stderr, "PROGRAM: cannot write output: REASON", and
// a command that succeeded exits 1.
int run_program(const Program& program, int argc, const char* const* argv);

}  // namespace relaybus::tool
